"""Which of ROME's known facts does an instruct model complete: with the raw prompt (what editkit's known-facts
filter, editkit.data.facts.predicted_facts, keeps), inside its chat format, or neither? One JSON line per framing:

    python benchmarks/chat_facts.py --model smollm2-135m

A fact counts as completed when the greedy next token is the first token of " " + attribute (or of the attribute
without its space, which a chat reply may start with). Framings: the raw prompt; the prompt starting the assistant's
turn after the chat template with "Complete the sentence." as the user's message; the prompt as the user's message.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from editkit.data.facts import known_facts  # noqa: E402
from editkit.model.loading import load_model  # noqa: E402


def completed(lm, texts: list[str], attributes: list[str], batch: int = 32) -> int:
    tok, n = lm.tok, 0
    for i in range(0, len(texts), batch):
        enc = tok(texts[i:i + batch], return_tensors="pt", padding=True, add_special_tokens=False)
        last = enc["attention_mask"].sum(1) - 1  # padded on the right (models.load_model's convention)
        with torch.no_grad():
            top = lm.runner.logits(lm.runner.hidden(**enc)[torch.arange(len(last)), last], norm=False).argmax(-1)
        for t, attribute in zip(top.tolist(), attributes[i:i + batch]):
            firsts = {ids[0] for a in (" " + attribute.strip(), attribute.strip())
                      if (ids := tok(a, add_special_tokens=False)["input_ids"])}
            n += t in firsts
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()
    lm = load_model(args.model, device="cpu")
    if lm.tok.padding_side != "right":
        sys.exit("expects right padding")
    facts = known_facts()
    prompts, attributes = [f["prompt"] for f in facts], [f["attribute"] for f in facts]
    chat = lambda user: lm.tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False,  # noqa: E731
                                                   add_generation_prompt=True)
    framings = {"raw prompt": prompts,
                "assistant turn starts with the prompt": [chat("Complete the sentence.") + p for p in prompts],
                "prompt as the user's message": [chat(p) for p in prompts]}
    for name, texts in framings.items():
        print(json.dumps({"model": lm.name, "framing": name, "completed": completed(lm, texts, attributes),
                          "facts": len(facts)}), flush=True)


if __name__ == "__main__":
    main()
