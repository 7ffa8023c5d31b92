from django.apps import AppConfig


class NvlinkConfig(AppConfig):
    name = "llmgw.nvlink"
    label = "nvlink"
    verbose_name = "NVLink domains"
