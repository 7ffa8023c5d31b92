"""NVIDIA XID codes of the HARDWARE kind: the one list the agent and the server share.

An XID is the NVIDIA driver's error number, printed to the kernel log as
`NVRM: Xid (PCI:0000:9b:00): 119, pid=..., ...` and delivered by NVML as an
`nvmlEventTypeXidCriticalError` event. Most codes are about the program that ran
(13 graphics exception, 31 page fault, 43 stopped processing, 45 preemptive cleanup):
the card is fine and the next job will run. The codes below say the card itself needs
a GPU reset, a node reboot or a technician before it can be trusted with work, so a GPU
that reported one since its last reset is not free.

The server imports this module (`from llmgw_agent.protocol.xids import HARDWARE_XIDS,
is_hardware_xid`), so the agent and the control plane can never disagree about a code.

Source: NVIDIA's XID catalog, https://docs.nvidia.com/deploy/xid-errors/ (the
"analyzing-xid-catalog" table: mnemonic, description, immediate resolution bucket),
and its memory-error guide https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/.
Left out on purpose, with the reason:
- 13, 31, 43, 45: application errors (resolution RESTART_APP or IGNORE).
- 121 C2C_ERROR (GB200 only): a corrected C2C link error, resolution IGNORE.
- 154 GPU_RECOVERY_ACTION_CHANGED: informational, it summarises the action for another
  XID that is itself counted.
- 155 NVLINK_SW_DEFINED_ERROR (Blackwell): raised for intentional link-down, including
  transitions to SLEEP, so on its own it marks healthy idle GPUs.
"""

from __future__ import annotations

# code -> (catalog mnemonic, meaning and why it makes the card not free)
HARDWARE_XIDS: dict[int, tuple[str, str]] = {
    48: (
        "ROBUST_CHANNEL_GPU_ECC_DBE",
        "Double-bit ECC error: an uncorrectable memory error; reset the GPU or reboot.",
    ),
    62: (
        "PMU_HALT_ERROR",
        "Internal micro-controller halt; catalog action RESET_GPU.",
    ),
    63: (
        "INFOROM_DRAM_RETIREMENT_EVENT",
        "Row remapping (page retirement) recorded: the new mapping only takes effect after "
        "a GPU reset (the kernel line says 'reset gpu to activate').",
    ),
    64: (
        "INFOROM_DRAM_RETIREMENT_FAILURE",
        "Row remapping failed (e.g. all reserved rows of a bank used); catalog action "
        "RESET_GPU, then CONTACT_SUPPORT.",
    ),
    74: (
        "NVLINK_ERROR",
        "NVLink error between the GPU and a peer or NVSwitch; a GPU reset or node reboot "
        "is needed to clear it (A100/H100).",
    ),
    79: (
        "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        "GPU has fallen off the bus: unreachable over PCIe; catalog action RESTART_BM "
        "(reboot the node).",
    ),
    92: (
        "EXCESSIVE_SBE_INTERRUPTS",
        "High single-bit ECC error rate: the memory is degrading; investigatory action "
        "CONTACT_SUPPORT.",
    ),
    94: (
        "ROBUST_CHANNEL_CONTAINED_ERROR",
        "Contained uncorrectable memory error: the affected process was stopped; a row "
        "remap is pending until the GPU is reset.",
    ),
    95: (
        "ROBUST_CHANNEL_UNCONTAINED_ERROR",
        "Uncontained uncorrectable memory error: every process on the GPU is affected; "
        "catalog action RESET_GPU.",
    ),
    119: (
        "GSP_RPC_TIMEOUT",
        "GSP firmware RPC timeout: the GPU System Processor stopped answering; catalog "
        "action RESET_GPU.",
    ),
    120: (
        "GSP_ERROR",
        "GSP firmware error; catalog action RESET_GPU.",
    ),
    140: (
        "UNRECOVERABLE_ECC_ERROR_ESCAPE",
        "Unrecovered ECC error; catalog action RESET_GPU, then CONTACT_SUPPORT.",
    ),
    156: (
        "RESOURCE_RETIREMENT_EVENT",
        "Resource retirement event (Hopper and later); catalog action RESET_GPU.",
    ),
    157: (
        "RESOURCE_RETIREMENT_FAILURE",
        "Resource retirement failed (Hopper and later); investigatory action CONTACT_SUPPORT.",
    ),
}


def is_hardware_xid(code: int) -> bool:
    """True when XID `code` means the card itself needs a reset, reboot or repair."""
    return code in HARDWARE_XIDS
