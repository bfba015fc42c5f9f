"""A board agent that dies, whole, when a tuning candidate is loaded on it: a board killed mid-session, on cue.

``python -m tests.dying_board --tracker ... --key host --port P`` (in a process group of its own, as the
farm starts agents) serves like workers/board_agent.py until a session loads a candidate
(``tvmbench-cand-*.so``, workers/tuning/builder.py's folders), then SIGKILLs its process group: the agent
and the session process serving the candidate. Killing "whichever board is in a session" from outside
raced the candidates' sessions, which last milliseconds: the kill could land between them, or on the
tuned job's final measurement, and cost no trial.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from tvm.rpc import server

from workers import board_agent

_server_env = server._server_env


def _dying_server_env(load_library: str, work_path: Any = None) -> Any:
    """TVM's session environment, with a ``load_module`` that dies on a tuning candidate."""
    import tvm_ffi

    temp = _server_env(load_library, work_path)
    load_module = tvm_ffi.get_global_func("tvm.rpc.server.load_module")

    @tvm_ffi.register_global_func("tvm.rpc.server.load_module", override=True)
    def _load(file_name: str) -> Any:
        if os.path.basename(file_name).startswith("tvmbench-cand-"):
            os.killpg(0, signal.SIGKILL)
        return load_module(file_name)

    return temp


if __name__ == "__main__":
    server._server_env = _dying_server_env  # the session process is forked: it sees this binding
    board_agent.main()
