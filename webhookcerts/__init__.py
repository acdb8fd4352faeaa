"""The webhooks' serving certificate, issued and renewed by the chain itself (no cert-manager).

`authority` is pure (what to issue, whether what is stored still serves); `keeper` reads and
writes the Secret and the webhook configurations' `caBundle`, and runs inside the verdict driver,
the one credentialed Deployment of the control-plane side.
"""
