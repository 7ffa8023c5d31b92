from __future__ import annotations

from django.db import models


class ApiToken(models.Model):
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
