"""Talk to dshd from Python with grpcio: Daemon.Status, ShellEnv.List, and one scripted turn.

    mkdir -p gen && python -m grpc_tools.protoc -I ../../proto --python_out=gen \
        --grpc_python_out=gen ../../proto/dsh/v1/*.proto
    PYTHONPATH=gen python client.py [/path/to/dshd.sock]
"""

import json
import os
import sys

import grpc

from dsh.v1 import agents_pb2, agents_pb2_grpc, daemon_pb2, daemon_pb2_grpc
from dsh.v1 import shell_env_pb2, shell_env_pb2_grpc


def default_socket():
    """The socket dshd and dshctl use when none is named: $DSH_SOCKET, else
    $XDG_RUNTIME_DIR/dsh/dshd.sock (an absolute XDG_RUNTIME_DIR), else <home>/run/dshd.sock, where
    the home is $DSH_HOME (when not blank) or ~/.dsh."""
    if os.environ.get("DSH_SOCKET"):
        return os.path.abspath(os.path.expanduser(os.environ["DSH_SOCKET"]))
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime_dir):
        return os.path.join(runtime_dir, "dsh", "dshd.sock")
    home = os.environ.get("DSH_HOME", "")
    if not home.strip():
        home = "~/.dsh"
    return os.path.join(os.path.abspath(os.path.expanduser(home)), "run", "dshd.sock")


socket_path = sys.argv[1] if len(sys.argv) > 1 else default_socket()
# gRPC core would send the socket path, percent-encoded, as :authority; dshd's HTTP/2 layer
# rejects that (the call fails INTERNAL "Stream removed"), so name a plain host instead.
channel = grpc.insecure_channel(
    f"unix://{socket_path}", options=[("grpc.default_authority", "localhost")]
)

try:
    status = daemon_pb2_grpc.DaemonStub(channel).Status(daemon_pb2.StatusRequest(), timeout=10)
    print(f"dshd {status.version} (protocol {status.protocol_version}), home {status.dsh_home}")

    listed = shell_env_pb2_grpc.ShellEnvStub(channel).List(
        shell_env_pb2.ListVariablesRequest(), timeout=10
    )
    for variable in listed.variables:
        print(f"  {variable.key}  ({variable.contributor})")

    agents = agents_pb2_grpc.AgentsStub(channel)
    script = {"replies": [
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo $DSH_SESSION_ID"}}]},
        {"text": "Done."},
    ]}
    model = agents_pb2.ModelSpec(provider="scripted", script_json=json.dumps(script))
    agent = agents.Create(agents_pb2.CreateAgentRequest(cwd=os.getcwd(), model=model), timeout=10)
    print(f"agent created: {agent.agent_id}")

    # Server streaming: no deadline, the turn takes as long as it takes. Every event has the
    # session log's envelope: type, session_id, seq (logged events only), time_ms, data_json.
    ended = ""
    for event in agents.Prompt(agents_pb2.PromptRequest(agent_id=agent.agent_id, text="hi")):
        seq = f" seq={event.seq}" if event.HasField("seq") else ""
        print(f"event {event.type}{seq} {event.data_json}")
        if event.type == "turn/end" and event.session_id == agent.agent_id:
            ended = json.loads(event.data_json)["reason"]["kind"]
    agents.Close(agents_pb2.CloseAgentRequest(agent_id=agent.agent_id), timeout=10)
    sys.exit(0 if ended == "completed" else 1)
except grpc.RpcError as error:
    if error.code() == grpc.StatusCode.UNAVAILABLE and not os.path.exists(socket_path):
        print(
            f"error: no dshd is listening on {socket_path}; "
            "start it with 'dshd' or 'systemctl --user start dshd'",
            file=sys.stderr,
        )
    else:
        print(f"error: {error.code().name}: {error.details()}", file=sys.stderr)
    sys.exit(1)
