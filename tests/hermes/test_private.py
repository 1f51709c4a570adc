"""The private Hermes names the plugin reads (meshctl.hermes._private) exist in the Hermes
the tests pin. When a Hermes release renames one, this fails naming it: the plugin
would carry on without it (and log a warning once), so nothing else would fail."""

from __future__ import annotations

import json

from tests.hermes.conftest import HERMES_VERSION, Hermes

from meshctl.hermes._private import CHECKED_AGAINST

PROBE = r"""
import inspect, json
import model_tools  # discovers plugins (the manager exists)
from hermes_cli.plugins import get_plugin_manager
from gateway.run import GatewayRunner
import tools.skill_provenance as provenance
import agent.turn_context as turn_context
import agent.agent_init as agent_init

found = {
    "PluginManager._cli_ref": hasattr(get_plugin_manager(), "_cli_ref"),
    "GatewayRunner._session_key_for_source": callable(
        getattr(GatewayRunner, "_session_key_for_source", None)),
    "tools.skill_provenance.get_current_write_origin": callable(
        getattr(provenance, "get_current_write_origin", None)),
    # pre_llm_call fires in a function of agent/turn_context.py with an `agent` argument,
    # and AIAgent's set-up gives it valid_tool_names
    "pre_llm_call's caller has `agent`": any(
        "pre_llm_call" in inspect.getsource(fn) and "agent" in inspect.signature(fn).parameters
        for _, fn in inspect.getmembers(turn_context, inspect.isfunction)),
    "AIAgent.valid_tool_names": "agent.valid_tool_names = " in inspect.getsource(agent_init),
}
print(json.dumps(found))
"""


def test_the_private_hermes_names_the_plugin_reads_exist(hermes: Hermes) -> None:
    assert CHECKED_AGAINST == HERMES_VERSION, "re-check meshctl/hermes/_private.py"

    done = hermes.python(PROBE)

    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    missing = [name for name, ok in found.items() if not ok]
    assert not missing, (
        f"Hermes {HERMES_VERSION} no longer has {missing}: meshctl/hermes/_private.py reads "
        "them (the plugin carries on without them, less well); find their new names"
    )
