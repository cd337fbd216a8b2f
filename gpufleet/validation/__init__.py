"""Validation: Xid classification (``xid``) and nccl-tests acceptance gates (``gates``)."""
