#!/usr/bin/env python3
"""Runs reference models from ../shared/reference through the ctypes binding: greedy
generation of stories260K must reproduce llama2.c's 200 tokens of text, and every
family's model must load and generate. Skips (exit 0, with the reason) when the folder
is absent.

    python3 examples/python/reference_check.py --lib build/src/libloom.so [--reference DIR]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loom_ctypes as loom  # noqa: E402


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.environ.get("LOOM_REFERENCE_DIR") or os.path.join(here, "..", "..", "..", "shared", "reference")
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lib", required=True)
    parser.add_argument("--reference", default=default)
    args = parser.parse_args()
    ref = os.path.abspath(args.reference)
    if not os.path.isdir(ref):
        print(f"SKIPPED: reference data folder not found: {ref} (set LOOM_REFERENCE_DIR)")
        return 0

    lib = loom.Library(args.lib)
    stories = os.path.join(ref, "models", "stories260K")
    model = lib.load_model(os.path.join(stories, "hf"))
    session = model.session()
    text, result = session.generate(lib.sampler(temperature=0.0), "", max_tokens=200)
    with open(os.path.join(stories, "expected", "greedy200.txt"), encoding="utf-8") as f:
        want = f.read().rstrip("\n")
    if text.rstrip("\n") != want or result.generated_tokens != 200:
        print("FAIL: stories260K greedy text differs from llama2.c's", file=sys.stderr)
        print(text[:200], file=sys.stderr)
        return 1
    print(f"stories260K: 200 greedy tokens equal llama2.c's text ({len(want)} characters)")

    for source in ["tiny-llama/hf", "qwen2-tiny/hf", "gpt2-tiny/gpt2-tiny-f32.gguf", "mistral-tiny/hf",
                   "phi3-tiny/hf", "small-quant/small-quant-q8_0.gguf"]:
        m = lib.load_model(os.path.join(ref, "models", source))
        s = m.session()
        out, r = s.generate(lib.sampler(seed=1), "The capital of France is", max_tokens=8)
        if r.generated_tokens < 1:
            print(f"FAIL: {source} generated nothing", file=sys.stderr)
            return 1
        print(f"{source}: {r.prompt_tokens} prompt tokens, {r.generated_tokens} generated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
