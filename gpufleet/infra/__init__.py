"""The Pulumi program: backends (where the cluster's nodes come from) and the Kubernetes platform layer.

Modules:

- ``contract``: what a backend hands the platform layer, and the view of the version lock used here;
- ``scheduling``: labels, taints and tolerations that separate control (system) and data (GPU) planes;
- ``charts``: the Helm charts we install and the exact versions they are pinned to;
- ``values``: Helm values and NVIDIA custom resources derived from the spec and the lock (pure data);
- ``manifests``: plain Kubernetes objects (namespaces, NetworkPolicies, Lustre volumes, ...) as pure data;
- ``upstream_check``: checks of our values / custom resources against upstream chart values and CRD schemas;
- ``backends``, ``platform``, ``program``: the Pulumi resources themselves;
- ``offline``: evaluation of the program with the SDK's mocks (``gpufleet plan``);
- ``automation``: ``gpufleet up`` for non-local stacks (Pulumi Automation API).

``backends``, ``platform``, ``program`` import the Pulumi SDK resources; import them only after
``pulumi.runtime.set_mocks`` when evaluating offline.
"""
