"""The control plane's settings plus the upgrade's app: what the
upgrade's `manage.py migrate` runs with, while the running processes keep
the settings they were started with (they know nothing of the app)."""

from llmgw.settings import *  # noqa: F403
from llmgw.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.reliability.upgrade"]
