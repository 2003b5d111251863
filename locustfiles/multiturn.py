"""Replay whole ShareGPT conversations: every turn re-sends the conversation so far (docs/conversations.md).

    locust -f locustfiles/multiturn.py --host http://127.0.0.1:8000 --model my-model --headless -u 8 \
        --num-prompts 50 --turn-think-time exp:2

Each user runs one conversation after another (closed loop, -u users); with --arrival open conversations arrive
at --request-rate per second and their turns follow with think time. The options of --multi-turn apply
(--history recorded|live, --max-turns, --max-context-tokens, --context-policy, --turn-think-time,
--reading-speed, --session-header, --system-prompt-len); docs/options.md lists them all.
"""

from locust import run_single_user

from llmload.locust import ConversationUser


class Conversations(ConversationUser):
    pass


if __name__ == "__main__":
    run_single_user(Conversations)
