"""Django's TextChoices, as mypy is to see it.

Django ships no types, so to mypy its TextChoices is Any and a member
such as `READY = "ready", "ready"` reads as the tuple written, not the
str enum member Django makes of it. Under TYPE_CHECKING this module says
what Django builds: a str enum whose value is the first item and whose
label is the second. At run time it is Django's own class.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from enum import StrEnum
    from typing import ClassVar

    class TextChoices(StrEnum):
        choices: ClassVar[list[tuple[str, str]]]
        labels: ClassVar[list[str]]
        values: ClassVar[list[str]]

        @property
        def label(self) -> str:
            raise NotImplementedError

        @property
        def value(self) -> str:
            return self._value_

else:
    from django.db.models import TextChoices

__all__ = ["TextChoices"]
