#!/usr/bin/env python3
"""Points the official `openai` Python client at a running `longscope-cli serve`.

    python3 -m venv /tmp/oai && /tmp/oai/bin/pip install openai
    build/app/cli/longscope-cli serve --api-key sk-local &
    /tmp/oai/bin/python scripts/openai-client-check.py --base-url http://127.0.0.1:8080/v1 --api-key sk-local

Exits non-zero when the server answers something the client does not expect.
"""
import argparse
import sys

import openai


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--api-key", default="sk-local")
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0)
    failures = []

    def check(name, ok, detail=""):
        print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
        if not ok:
            failures.append(name)

    print(f"openai {openai.__version__} -> {args.base_url}")

    models = client.models.list()
    model = models.data[0].id
    check("models.list", len(models.data) == 1, model)

    c = client.completions.create(model=model, prompt="Once upon a time", max_tokens=30, temperature=0)
    check("completions.create", c.choices[0].finish_reason == "length" and c.usage.completion_tokens == 30,
          repr(c.choices[0].text))

    messages = [{"role": "system", "content": "You tell short stories."},
                {"role": "user", "content": "Tell me about a dog."}]
    whole = client.chat.completions.create(model=model, messages=messages, max_tokens=40, seed=7, temperature=0.8)
    text = whole.choices[0].message.content
    check("chat.completions.create", whole.choices[0].message.role == "assistant" and bool(text),
          f"{whole.choices[0].finish_reason}, usage {whole.usage.prompt_tokens}+{whole.usage.completion_tokens}: {text!r}")

    stream = client.chat.completions.create(model=model, messages=messages, max_tokens=40, seed=7, temperature=0.8,
                                            stream=True, stream_options={"include_usage": True})
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    check("chat stream equals non-stream (same seed)", "".join(pieces) == text and finish == whole.choices[0].finish_reason,
          f"{len(pieces)} deltas, finish {finish}, usage {usage.completion_tokens if usage else None}")

    stopped = client.completions.create(model=model, prompt="Once upon a time", max_tokens=60, temperature=0,
                                        stop=["Lily"])
    check("stop sequence", stopped.choices[0].finish_reason == "stop" and not stopped.choices[0].text.endswith("Lily"),
          repr(stopped.choices[0].text))

    alpha = client.completions.create(model=model, prompt="Once upon a time", max_tokens=20, temperature=0,
                                      extra_body={"ntk_alpha": 8, "kv_mode": "vmm", "memory_efficient_attention": True,
                                                  "causal_flash": True, "kv_before_rope": True})
    metrics = client.get("/metrics", cast_to=object)
    step = metrics["step"]
    check("extra_body long-context fields, seen in /v1/metrics",
          step["settings"]["kv_mode"] == "vmm" and step["ntk_alpha"] == 8 and step["settings"]["causal_flash"],
          f"{alpha.choices[0].text!r}; step {step['step']}: alpha {step['ntk_alpha']}, kv {step['settings']['kv_mode']}, "
          f"{step['tokens_per_second']:.0f} tok/s, KV resident {step['memory']['kv_resident']} of "
          f"{step['memory']['kv_reserved']} bytes")

    def expect_error(name, exc_type, code, call):
        try:
            call()
            check(name, False, "no error raised")
        except exc_type as e:
            got = (e.body or {}).get("code") if isinstance(e.body, dict) else None
            check(name, code is None or got == code, f"{type(e).__name__} {e.status_code} code={got}")

    expect_error("temperature 5 -> 400", openai.BadRequestError, None,
                 lambda: client.chat.completions.create(model=model, messages=messages, temperature=5))
    expect_error("unknown kv_mode -> 400", openai.BadRequestError, None,
                 lambda: client.chat.completions.create(model=model, messages=messages, extra_body={"kv_mode": "paged"}))
    expect_error("context overflow -> 400", openai.BadRequestError, "context_length_exceeded",
                 lambda: client.chat.completions.create(model=model, messages=messages, max_tokens=100000))
    bad_key = openai.OpenAI(base_url=args.base_url, api_key="sk-wrong", max_retries=0)
    expect_error("wrong API key -> 401", openai.AuthenticationError, "invalid_api_key",
                 lambda: bad_key.models.list())

    print("all checks passed" if not failures else f"{len(failures)} failed: {', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
