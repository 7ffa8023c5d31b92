from django.apps import AppConfig


class NvlinkConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    name = "llmgw.nvlink"
    label = "nvlink"
    verbose_name = "NVLink domains"
