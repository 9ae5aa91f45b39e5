"""`python -m editkit export --model M --patch P (--hf DIR | --gguf FILE [--type f32|f16|q8_0]) --json`: the
base model with a saved edit (`edit --save-patch P`) applied, written for use outside editkit: a Hugging Face
folder that `transformers.AutoModelForCausalLM.from_pretrained` loads, or a GGUF file for llama.cpp-compatible
readers (editkit/model/export.py, gguf_export.py). The base model's files are only read; nothing is written
until every check passed, and a failed export leaves no file behind."""
from ..core.errors import EditkitError
from .common import add_model_arg, load


def register(sub):
    p = sub.add_parser("export", help="write the model with a saved edit applied as a Hugging Face folder "
                                      "or GGUF")
    p.add_argument("--patch", required=True, help="the edit (<P>.safetensors with <P>.json beside it)")
    p.add_argument("--hf", default=None, metavar="DIR", help="write a Hugging Face folder (new or empty)")
    p.add_argument("--gguf", default=None, metavar="FILE", help="write a GGUF file")
    p.add_argument("--type", default=None, choices=("f32", "f16", "q8_0"),
                   help="the GGUF's weights: f32 (the default: the edited model exactly), f16 or q8_0 (smaller)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing GGUF file (a folder for --hf "
                                                            "must be new or empty either way)")
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def run(args) -> list:
    from ..model.export import Provenance, export_hf
    from ..model.gguf_export import export_gguf
    from ..model.loading import split_name
    from ..model.weights import applied, check_delta, load_patch

    if not args.hf and not args.gguf:
        raise EditkitError("say where to write: --hf DIR, --gguf FILE or both")
    if args.type and not args.gguf:
        raise EditkitError("--type sets a GGUF file's weights; a Hugging Face folder is written in the model's "
                           "dtype (--dtype)")
    _check_targets(args)  # before the model loads: a name taken or unwritable is said at once
    delta, manifest = load_patch(args.patch)
    made_on = manifest.get("model")
    lm = load(args)
    if made_on and split_name(made_on)[0] != split_name(lm.name)[0]:
        raise EditkitError(f"the patch was made on {made_on}, not {lm.name}: give --model "
                           f"{split_name(made_on)[0]}")
    check_delta(lm, delta)
    provenance = Provenance(lm.name, manifest.get("method") or "a saved patch",
                            manifest.get("requests") or [], manifest.get("hparams"))
    say = _say()
    out = []
    with applied(lm, delta):
        if args.gguf:  # first: its checks refuse more (architecture, tokenizer, config) before a byte is written
            out.append(export_gguf(lm, args.gguf, provenance, args.type or "f32", say, args.overwrite))
        if args.hf:
            out.insert(0, export_hf(lm, args.hf, provenance, say))
    return [e.to_json() for e in out]


def _check_targets(args) -> None:
    from pathlib import Path

    from ..core.paths import new_file, new_folder

    hf = new_folder(args.hf) if args.hf else None
    gguf = new_file(args.gguf, args.overwrite) if args.gguf else None
    if hf is not None and gguf is not None and (hf == gguf or hf in gguf.parents):
        raise EditkitError("--gguf must name a file outside the --hf folder")
    if args.gguf and Path(args.gguf).suffix.lower() != ".gguf":
        raise EditkitError(f"--gguf {args.gguf}: give a file name ending in .gguf")


def _say():
    import sys

    return lambda message: print(f"[editkit] {message}", file=sys.stderr, flush=True)


def show(rows: list) -> None:
    for r in rows:
        kind = "Hugging Face folder" if r["format"] == "hf" else f"GGUF ({r['type']})"
        print(f"{kind}: {r['path']} ({r['bytes'] / 1e6:,.1f} MB, {r['tensors']} tensors, "
              f"{r['seconds']:.1f} s)")
        for note in r["notes"]:
            print(f"  note: {note}")
