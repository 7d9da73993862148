"""Deterministic prompt sets for the tiny example.

Two disjoint sets come out of the same template families:
  * verification prompts (kconvert/prompts/{math,chat,code}.jsonl, 32 each), seed `seed`;
  * training examples (prompt + reference answer) for the tiny target and for draft distillation,
    seed `seed + 1000`; any prompt text that also occurs in the verification set is dropped, and
    disjointness is asserted.

The reference answers are template fills that depend on the prompt (names, numbers, topics), so a
model trained on them produces varied, non-repetitive but learnable continuations.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

NAMES = ["Sara", "Tom", "Lena", "Omar", "Mia", "Ravi", "Nina", "Jack", "Aiko", "Ben", "Zoe", "Ivan",
         "Lucy", "Marco", "Priya", "Sam", "Hana", "Leo", "Ella", "Yusuf"]
ITEMS = ["apples", "books", "stickers", "marbles", "cookies", "pencils", "cards", "shells", "coins",
         "stamps", "eggs", "flowers"]
PLACES = ["store", "market", "school fair", "bakery", "library sale", "garden shop"]
TOPICS = ["Python", "history", "cooking", "chess", "guitar", "French", "algebra", "painting",
          "running", "photography", "gardening", "writing", "statistics", "music theory",
          "public speaking", "drawing"]
THINGS = ["rain", "the moon", "a rainbow", "wind", "snow", "thunder", "the tide", "fog", "an echo",
          "a shadow", "rust", "a volcano"]
ADJ = ["simple", "short", "clear", "friendly", "practical"]
OPS = [
    ("sum", "total = 0\n    for x in xs:\n        total += x\n    return total"),
    ("product", "result = 1\n    for x in xs:\n        result *= x\n    return result"),
    ("maximum", "best = xs[0]\n    for x in xs:\n        if x > best:\n            best = x\n    return best"),
    ("minimum", "best = xs[0]\n    for x in xs:\n        if x < best:\n            best = x\n    return best"),
    ("average", "return sum(xs) / len(xs)"),
    ("number of even values", "return sum(1 for x in xs if x % 2 == 0)"),
    ("sorted copy", "return sorted(xs)"),
    ("reversed copy", "return xs[::-1]"),
]
STR_OPS = [
    ("count the vowels in", "count_vowels", "return sum(1 for c in s if c in 'aeiou')"),
    ("reverse", "reverse_text", "return s[::-1]"),
    ("turn to upper case", "to_upper", "return s.upper()"),
    ("count the words in", "count_words", "return len(s.split())"),
    ("remove the spaces from", "strip_spaces", "return s.replace(' ', '')"),
    ("check for a palindrome in", "is_palindrome", "return s == s[::-1]"),
]


def _math(rng: random.Random) -> tuple[str, str]:
    name, item, place = rng.choice(NAMES), rng.choice(ITEMS), rng.choice(PLACES)
    kind = rng.randrange(4)
    a, b, c = rng.randint(3, 60), rng.randint(2, 30), rng.randint(1, 20)
    if kind == 0:
        c = min(c, a + b)
        p = (f"{name} has {a} {item}. {name} buys {b} more {item} at the {place} and gives away {c}. "
             f"How many {item} does {name} have now?")
        s = (f"{name} starts with {a} {item}. After buying {b} more, {name} has {a} + {b} = {a + b}. "
             f"After giving away {c}, {name} has {a + b} - {c} = {a + b - c}. The answer is {a + b - c}.")
    elif kind == 1:
        p = (f"A box holds {b} {item}. {name} fills {c} boxes at the {place}. "
             f"How many {item} are in the boxes?")
        s = f"Each box holds {b} {item} and there are {c} boxes, so {b} x {c} = {b * c}. The answer is {b * c}."
    elif kind == 2:
        price, n = rng.randint(2, 9), rng.randint(2, 12)
        p = (f"At the {place}, one of the {item} costs {price} dollars. {name} buys {n} of them and pays "
             f"with {price * n + c} dollars. How much change does {name} get?")
        s = (f"The {item} cost {price} x {n} = {price * n} dollars. The change is {price * n + c} - "
             f"{price * n} = {c} dollars. The answer is {c}.")
    else:
        n = rng.randint(2, 6)
        tot = b * n
        p = (f"{name} shares {tot} {item} equally among {n} friends. How many {item} does each friend get?")
        s = f"{name} has {tot} {item} for {n} friends, so {tot} / {n} = {b}. The answer is {b}."
    return p, s


def _chat(rng: random.Random) -> tuple[str, str]:
    kind = rng.randrange(4)
    topic, thing, adj = rng.choice(TOPICS), rng.choice(THINGS), rng.choice(ADJ)
    if kind == 0:
        p = f"What is a good way to learn {topic}?"
        s = (f"A good way to learn {topic} is to practice a little every day. Start with the basics of "
             f"{topic}, set small goals, and review what you learned each week.")
    elif kind == 1:
        p = f"Can you give me a {adj} explanation of {thing}?"
        s = (f"Here is a {adj} explanation of {thing}. {thing[0].upper() + thing[1:]} happens because of "
             f"forces in nature that we can observe and measure. Scientists study {thing} to learn more.")
    elif kind == 2:
        n = rng.randint(2, 5)
        p = f"Give me {n} tips for getting better at {topic}."
        tips = ["practice daily", "find a mentor", "set clear goals", "take short breaks", "track progress"]
        body = " ".join(f"{i + 1}. {tips[i].capitalize()}." for i in range(n))
        s = f"Here are {n} tips for {topic}: {body} Good luck with {topic}!"
    else:
        name = rng.choice(NAMES)
        p = f"Write a {adj} note to {name} about {topic}."
        s = (f"Dear {name}, I wanted to share a {adj} note about {topic}. I think {topic} is a great "
             f"thing to explore, and I hope you enjoy it too. Best wishes!")
    return p, s


def _code(rng: random.Random) -> tuple[str, str]:
    kind = rng.randrange(5)
    if kind == 0:
        op, body = rng.choice(OPS)
        fname = rng.choice(["compute", "get", "find", "calc", "list", "my", "fast", "simple"]) + "_" + op.split()[0]
        what = rng.choice(["numbers", "integers", "values", "floats"])
        p = f"Write a Python function named {fname} that returns the {op} of a list of {what}."
        s = f"Here is the function:\n\ndef {fname}(xs):\n    {body}\n\nIt returns the {op} of xs."
    elif kind == 1:
        verb, fname, body = rng.choice(STR_OPS)
        p = f"Write a short Python function to {verb} a string."
        s = f"Here is the function:\n\ndef {fname}(s):\n    {body}\n\nCall {fname} with any string."
    elif kind == 2:
        a, b = rng.randint(1, 9), rng.randint(10, 30)
        p = f"Write a Python loop that prints the numbers from {a} to {b}."
        s = f"Here is the loop:\n\nfor i in range({a}, {b + 1}):\n    print(i)\n\nIt prints {a} up to {b}."
    elif kind == 3:
        k = rng.randint(2, 20)
        fname = rng.choice(["is_divisible", "divides", "check_multiple"])
        p = f"Write a Python function {fname} that checks whether a number is divisible by {k}."
        s = f"Here is the function:\n\ndef {fname}(n):\n    return n % {k} == 0\n\nIt returns True when {k} divides n."
    else:
        k = rng.randint(1, 50)
        p = f"Write a Python function that adds {k} to every item in a list."
        s = f"Here is the function:\n\ndef add_{k}(xs):\n    return [x + {k} for x in xs]\n\nEach item grows by {k}."
    return p, s


GENERATORS = {"math": _math, "chat": _chat, "code": _code}


def verification_prompts(seed: int, per_set: int = 32) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for k, (name, gen) in enumerate(GENERATORS.items()):
        rng = random.Random(seed * 7919 + k)
        seen: set[str] = set()
        rows: list[dict] = []
        while len(rows) < per_set:
            p, _ = gen(rng)
            if p in seen:
                continue
            seen.add(p)
            rows.append({"id": f"{name}-{len(rows):03d}", "prompt": p})
        out[name] = rows
    return out


def training_examples(seed: int, n: int, exclude: set[str]) -> list[dict]:
    rng = random.Random((seed + 1000) * 7919)
    names = list(GENERATORS)
    seen: set[str] = set()
    rows: list[dict] = []
    tries = 0
    while len(rows) < n:
        tries += 1
        assert tries < 100 * n, "template space too small for the requested number of prompts"
        name = names[len(rows) % len(names)]
        p, s = GENERATORS[name](rng)
        if p in seen or p in exclude:
            continue
        seen.add(p)
        rows.append({"id": f"train-{len(rows):05d}", "set": name, "prompt": p, "answer": s})
    return rows


def build(seed: int, prompts_dir: Path, work_dir: Path, n_train: int) -> None:
    ver = verification_prompts(seed)
    prompts_dir.mkdir(parents=True, exist_ok=True)
    ver_text: set[str] = set()
    for name, rows in ver.items():
        with open(prompts_dir / f"{name}.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        ver_text |= {r["prompt"] for r in rows}
    train = training_examples(seed, n_train, ver_text)
    assert not ({r["prompt"] for r in train} & ver_text), "training and verification prompts overlap"
    work_dir.mkdir(parents=True, exist_ok=True)
    with open(work_dir / "train.jsonl", "w") as f:
        for r in train:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"prompts: {sum(len(v) for v in ver.values())} verification, {len(train)} training (disjoint)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompts-dir", type=Path, default=Path("kconvert/prompts"))
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/kconvert-tiny-build"))
    ap.add_argument("--n-train", type=int, default=1200)
    a = ap.parse_args()
    build(a.seed, a.prompts_dir, a.work_dir, a.n_train)
