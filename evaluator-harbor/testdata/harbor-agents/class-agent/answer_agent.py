"""A Harbor BaseAgent subclass as a candidate would ship it: it writes the task's answer
with environment.exec (the value from agent.toml's [env], which reaches it through --ae)
and reports some usage, so the test sees both in Harbor's result.json."""
from harbor.agents.base import BaseAgent


class AnswerAgent(BaseAgent):
    @staticmethod
    def name() -> str:
        return "evolve-test-answer-agent"

    def version(self) -> str | None:
        return "1"

    async def setup(self, environment) -> None:
        return

    async def run(self, instruction, environment, context) -> None:
        answer = self.extra_env.get("ANSWER", "none")
        await environment.exec(f"echo {answer} > /app/answer.txt")
        context.n_input_tokens = 5
        context.n_output_tokens = 3
        context.cost_usd = 0.125
