from __future__ import annotations

from django.db import models


class ApiToken(models.Model):  # type: ignore[misc]  # Django ships no types
    """A user's token for the REST API and the CLI (`Authorization: Token
    <secret>`).

    Only the SHA-256 of the secret is stored, as for gateway keys: a secret
    of 256 random bits needs no slow hash (there is no dictionary to guess
    from), and a copy of the database gives nobody a way in. The secret is
    shown once, when the token is made. Every token expires; deleting one
    refuses it at the next request.
    """

    user = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    # The secret's first characters, to tell tokens apart in lists; not a secret.
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()

    class Meta:
        ordering = ["user", "created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class NodeCertificate(models.Model):  # type: ignore[misc]  # Django ships no types
    """A node certificate the CA signed (llmgw.accounts.ca): kept so that
    revoking a node refuses every certificate it still holds, and so that
    only a certificate this control plane issued and still honours
    authenticates. The node is named, not referenced: accounts sits below
    the inventory and imports none of it."""

    serial = models.CharField(max_length=40, unique=True)
    node_name = models.CharField(max_length=253, db_index=True)
    not_before = models.DateTimeField()
    not_after = models.DateTimeField()
    issued_at = models.DateTimeField(auto_now_add=True)
    # "operator" (llmgw node add --cert) or "renewal" (asked by the agent).
    issued_by = models.CharField(max_length=100)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node_name", "-not_after"]

    def __str__(self) -> str:
        return f"{self.node_name} #{self.serial}"
