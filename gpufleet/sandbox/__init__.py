"""The local platform: Docker engine, node image, fixture repository and the sandbox cluster."""
