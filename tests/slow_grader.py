"""A custom reward function used by the pool tests: 'sleep' never finishes in time."""
import time


def slow_reward(response, ground_truth):
    if response == "sleep":
        time.sleep(60)
    return {"format_reward": 1.0, "answer_reward": 1.0, "reward": 1.0}
