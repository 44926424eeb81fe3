#!/usr/bin/env python3
"""words__stats: count the lines, words and characters of a text and find its
most common words.

An exec tool reads the call envelope {toolName, export, arguments, toolCallId,
context} as JSON on stdin and writes its output on stdout (JSON, or any text).
A non-zero exit is an error (E_TOOL) whose message is what it wrote to stderr.
"""
import collections
import json
import re
import sys

envelope = json.load(sys.stdin)
args = envelope["arguments"]  # already validated against the schema in words.yaml
text = args["text"]
words = re.findall(r"[\w']+", text.lower())
if not words:
    print("the text has no words; send some prose in 'text'", file=sys.stderr)
    sys.exit(1)
common = collections.Counter(words).most_common(args.get("top", 5))
json.dump({
    "lines": text.count("\n") + (0 if text.endswith("\n") else 1),
    "words": len(words),
    "characters": len(text),
    "top": [{"word": w, "count": n} for w, n in common],
}, sys.stdout)
