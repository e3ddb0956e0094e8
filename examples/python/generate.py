#!/usr/bin/env python3
"""Generate and embed through loom's C API from Python (ctypes, no extension module).

    python3 examples/python/generate.py --lib build/src/libloom.so --model MODEL [--prompt TEXT]
"""
import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loom_ctypes as loom  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lib", required=True, help="path to libloom.so")
    parser.add_argument("--model", required=True, help="model directory, .gguf or pack")
    parser.add_argument("--prompt", default="Once upon a time")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    lib = loom.Library(args.lib)
    model = lib.load_model(args.model)
    info = model.info()
    print(f"[python] loom {lib.version}: {info.architecture.decode()} model, vocab {info.vocab_size}, "
          f"hidden {info.hidden_size}, {info.n_layers} layers", file=sys.stderr)
    session = model.session()
    sampler = lib.sampler(seed=args.seed)

    start = time.time()
    sys.stdout.write(args.prompt)
    text, result = session.generate(sampler, args.prompt, max_tokens=args.max_tokens,
                                    on_text=lambda piece: (sys.stdout.write(piece), sys.stdout.flush()))
    elapsed = time.time() - start
    print()
    print(f"[python] {result.generated_tokens} tokens in {elapsed:.3f} s "
          f"(stop: {loom.STOP_REASONS[result.stop_reason]})", file=sys.stderr)

    # The same seed gives the same text again.
    again, _ = session.generate(lib.sampler(seed=args.seed), args.prompt, max_tokens=args.max_tokens)
    if again != text:
        print("[python] FAIL: the same seed gave different text", file=sys.stderr)
        return 1

    tokenizer = model.tokenizer()
    ids = tokenizer.encode("The loom keeps every thread in its place.")
    if tokenizer.decode(ids[1:]) != "The loom keeps every thread in its place.":
        print("[python] FAIL: decode(encode(text)) != text", file=sys.stderr)
        return 1
    vector = session.embed(ids, normalize=True)
    norm = math.sqrt(sum(v * v for v in vector))
    print(f"[python] embedding: {len(vector)} dims, L2 norm {norm:.6f}", file=sys.stderr)
    if len(vector) != info.hidden_size or abs(norm - 1.0) > 1e-4 or result.generated_tokens < 1:
        print("[python] FAIL: unexpected embedding or empty generation", file=sys.stderr)
        return 1
    try:
        lib.load_model("/no/such/model")
        print("[python] FAIL: loading a missing model did not raise", file=sys.stderr)
        return 1
    except loom.LoomError as e:
        if e.name != "io" or "/no/such/model" not in str(e):
            print(f"[python] FAIL: unexpected error {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
