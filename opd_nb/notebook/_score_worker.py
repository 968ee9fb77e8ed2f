"""Score candidates with a workspace's reward processor; runs as a fresh subprocess.

Reads one JSON request on stdin ``{"classpath", "items": [...], "concurrency"}`` and writes one
JSON line per scored item (in completion order) to stdout. A fresh interpreter per request
means the user's latest edits are always what runs. Inputs go through the SDK's own
``RewardInput`` model, as on the function server.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import sys
import time
import traceback

CLEANERS = ("strip_reasoning", "strip_thinking", "clean_answer", "clean_text", "clean")


def _load(classpath: str):
    if ":" in classpath:
        filepath, _, cls = classpath.rpartition(":")
        module = filepath.removesuffix(".py").lstrip("./").replace("/", ".")
    else:
        module, _, cls = classpath.rpartition(".")
    mod = importlib.import_module(module)
    return mod, getattr(mod, cls)


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


async def _score(processor, cleaner, index: int, item: dict, sem: asyncio.Semaphore) -> None:
    from dashscope.finetune.reinforcement import RewardInput

    async with sem:
        start = time.perf_counter()
        out = {
            "index": index,
            "reward_score": None,
            "reward_metrics": None,
            "status": "failed",
            "error": None,
            "error_code": None,
            "cleaned": None,
        }
        candidate = item.get("candidate", "")
        try:
            if cleaner is not None:
                out["cleaned"] = cleaner(candidate)
            messages = list(item.get("messages") or []) + [{"role": "assistant", "content": candidate}]
            payload = {
                "agent_output": {"messages": messages, "rollout_extra": item.get("rollout_extra")},
                "ground_truth": item.get("ground_truth"),
            }
            data = RewardInput.model_validate(payload)
            result = processor.process(data)
            if inspect.isawaitable(result):
                result = await result
            dumped = result.model_dump(mode="json") if hasattr(result, "model_dump") else dict(result)
            reward = dumped.get("reward") or {}
            out.update(
                reward_score=reward.get("reward_score"),
                reward_metrics=reward.get("reward_metrics"),
                status=dumped.get("status", "success"),
                error=dumped.get("error"),
                error_code=dumped.get("error_code"),
            )
        except Exception as exc:
            tb = traceback.extract_tb(exc.__traceback__)
            user = [f for f in tb if "site-packages" not in f.filename and "opd_nb" not in f.filename]
            where = f" ({user[-1].filename.rsplit('/', 1)[-1]}:{user[-1].lineno})" if user else ""
            out.update(status="error", error=f"{type(exc).__name__}: {exc}{where}", error_code="exception")
        out["elapsed_ms"] = (time.perf_counter() - start) * 1000
        _emit(out)


async def _main(request: dict) -> None:
    try:
        mod, cls = _load(request["classpath"])
        processor = cls()
        if hasattr(processor, "setup"):
            maybe = processor.setup()
            if inspect.isawaitable(maybe):
                await maybe
    except Exception as exc:
        _emit({"fatal": f"cannot load {request['classpath']}: {type(exc).__name__}: {exc}"})
        return
    cleaner = next((getattr(mod, n) for n in CLEANERS if callable(getattr(mod, n, None))), None)
    sem = asyncio.Semaphore(max(1, int(request.get("concurrency", 8))))
    await asyncio.gather(
        *(_score(processor, cleaner, i, item, sem) for i, item in enumerate(request["items"]))
    )


if __name__ == "__main__":
    asyncio.run(_main(json.loads(sys.stdin.read())))
