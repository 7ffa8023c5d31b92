"""Celery for periodic and heavy work. In the embedded default the broker is
in memory and tasks run in-process (CELERY_TASK_ALWAYS_EAGER); `llmgw
worker` then runs the beat schedule itself."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmgw.settings")
app = Celery("llmgw")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
