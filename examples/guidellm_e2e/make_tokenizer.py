"""Build a tiny byte-level BPE tokenizer from local text, for GuideLLM without a model hub.

GuideLLM needs a tokenizer to cut synthetic prompts to an exact token count; no hub is
reachable here, so train one on this repository's own text (README, docs, sources) and
save it where ``--tokenizer kind=hf_auto,model=DIR`` finds it. Runs in GuideLLM's venv
(it has ``tokenizers`` and ``transformers``). Usage: python make_tokenizer.py OUT_DIR ROOT
"""

import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast


def main(out: str, root: str) -> None:
    files = sorted(str(p) for pattern in ("*.md", "bayesspec/**/*.py", "docs/**/*.md")
                   for p in Path(root).glob(pattern) if p.is_file())
    if not files:
        sys.exit(f"no text files under {root}")
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(files, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                   bos_token="<|endoftext|>", unk_token="<|endoftext|>")
    tmp = Path(out + ".tmp")
    fast.save_pretrained(str(tmp))
    tmp.rename(out)
    print(f"tokenizer: {len(files)} files, vocabulary {tok.get_vocab_size()} -> {out}",
          file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
