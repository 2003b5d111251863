"""Replay agentic sessions (coding-agent traces in the WEKA / Claude Code format) with their sub-agents
(docs/agentic.md).

    locust -f locustfiles/agentic.py --host http://127.0.0.1:8000 --headless -u 8 \
        --dataset-name weka_trace --dataset-path traces/ --time-scale 10

Each user replays one session after another (closed loop, -u users: at most that many sessions in flight); with
--arrival open sessions arrive at --request-rate per second. Within a session every chain (the main agent, each
sub-agent) sends a call after its previous one ended plus the recorded pause (--time-scale, --max-idle);
sub-agents run beside their parent. --stream-all streams the trace's non-streamed calls too.
"""

from locust import run_single_user

from llmload.locust import CompletionsUser


class AgentSessions(CompletionsUser):
    pass


if __name__ == "__main__":
    run_single_user(AgentSessions)
