"""Code that runs in the containers the chain adds to users' Pods (not hooks, not the agent):
the SSH sidecar's session entry (`ssh_session`)."""
