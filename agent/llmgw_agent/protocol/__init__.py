"""The wire protocol between the agent and the control plane
(docs/agent-protocol.md): typed structs for every payload, their bounds,
and the few rules both sides must apply alike (GUIDs, fabric identity,
hardware XIDs).

The agent, the simulator, the control plane and the tests all import this
package, and it imports nothing else of llmgw_agent (nor Django), so the
server can depend on it without depending on the agent.
"""

from typing import Final

# The version every payload carries; a Literal to mypy, as the structs want.
SCHEMA: Final = 1
