#!/usr/bin/env python3
"""import_torch.py — bring a PyTorch module that is not a torch.nn Transformer class into tfm, and back.

    import_torch.py import  --map MAP [--target T] --input STATE [--set KEY=VALUE ...] --out OUT
                            [--src-vocab FILE] [--tgt-vocab FILE]
    import_torch.py reverse --map MAP [--target T] (--config CFG.json --weights W.safetensors | --model-dir DIR)
                            [--set KEY=VALUE ...] --out STATE
    import_torch.py targets --map MAP          # lists the mapping's targets and what they write

MAP is a mapping file (JSON) or the name of one shipped in tools/import_maps/ (nb1_transformer_layer,
nb2_deeper_look, nb3_vit_block, nb4_reverse, nb5_build_transformer). STATE is the module's state_dict, saved with
torch.save (a dict of tensors, or a dict holding it under "state_dict" / "model_state_dict", or the module itself)
or a .safetensors file. `import` writes, by the target's "output":
  forward    OUT.json (a `tfm forward` module config, include/tfm/models/forward.h) and OUT.safetensors (F32);
             run it with  tfm forward --config OUT.json --weights OUT.safetensors --inputs IN --output RES
  model_dir  the directory OUT as `tfm train` writes it (include/tfm/models/model_dir.h): config.json
             ({"format": "tfm-train", "version": 1, "model": ModelConfig, "train": {...}, "vocab": {...}}),
             model.safetensors, src_vocab.txt, tgt_vocab.txt. Vocabularies: --src-vocab / --tgt-vocab (one token per
             line, line i = id i, as many lines as the embedding has rows) or, by default, the mapping's
             "vocab": id i is spelled str(i) except the specials it names ("<pad>" at pad_id, ...).
`reverse` writes a tfm model back into the module's own state_dict (torch.save for .pt/.pth, else safetensors). It
refuses a model the module does not compute as tfm does, in one line naming the config file, the key, the model's
value and the target's: the config import derives for the module (the target's "config", the model's own values of
its "infer" and "required" keys, then --set) must equal the model's key by key, where a key the target leaves unset
means tfm's default (attn_scale 1/√Dh, share_layers false, ...), except the keys that do not change the numbers
(dropout, drop_path, batch_first, bos_id, eos_id, max_len, enable_nested_tensor, mask_check). A model with
share_layers goes only into rules with "shared", one without only into rules without. --set states what the module
is built with where the target's "config" says otherwise, as on import (notebook 1's post-norm layer: --set
norm_first=false). It also refuses, naming the key, a tensor that cannot be represented in the module's layout (a
LayerNorm gain trained per feature that the module holds as one scalar). Every error is one line naming the key,
expected and actual value or shape.

As a library (torch and numpy only):
    import sys; sys.path.insert(0, "tools"); import import_torch as it
    m = it.load_mapping("nb4_reverse")
    config, tensors = it.import_state(m, "encoder", state_dict, overrides={})      # tfm config + {tfm key: array}
    back = it.reverse_state(m, "encoder", config, tensors, overrides={})           # {module key: array}
    dback = it.reverse_state(m, "encoder", config, grads, grad=True)               # gradients, mapped back

The mapping file:
  {"name": ..., "description": ...,
   "groups": {NAME: [RULE, ...]},                     reusable rule lists (e.g. one layer), applied under prefixes
   "targets": {NAME: {"output": "forward" | "model_dir",
                      "config": {...},                the tfm config (module config, or ModelConfig for model_dir)
                      "infer": {KEY: SPEC},           config values read from the source tensors:
                                                        "K:d" dim d of tensor K; "count:P" how many layer indices
                                                        match the prefix P (with {i}); "present:K" is K there
                      "required": [KEY, ...],         values only --set can give (e.g. nhead)
                      "ignore": [GLOB, ...],          source tensors that have no tfm counterpart
                      "vocab": {"specials": {TOKEN: CONFIG_ID_KEY}},    model_dir only
                      "train": {...},                 model_dir only: config.json's "train" object
                      "rules": [RULE, ...]}}}
  Config precedence: "config" < "infer" < --set. A RULE is one of
    {"to": T, "from": S}                        copy (with "transpose": true: a 2-D transpose)
    {"to": T, "qkv": [Sq, Sk, Sv]}              separate q, k, v Linear weights (or biases) stacked into in_proj
    {"to": T, "heads": [Wq, Wk, Wv]}            per-head (H, D, Dh) tensors used as einsum("btd,hdk->bhtk", x, W):
                                                  in_proj rows of head h = W[h]ᵀ, q then k then v
    {"to": T, "from": S, "broadcast": true}     a (1,) gain or shift, broadcast to (d_model,)
    {"from": S, "sinusoidal": "CONFIG_KEY"}     a stored sinusoidal table (1, L, D) (with "no_batch_dim": true,
                                                  (L, D)): checked against tfm's own table on import (it is not a
                                                  tfm tensor) and recomputed by reverse; L is the config's CONFIG_KEY
    {"group": NAME, "from_prefix": P, "to_prefix": Q [, "shared": CONFIG_KEY]}
                                                the group's rules under those prefixes; "{i}" in P and Q is a layer
                                                index. With "shared", the module repeats one layer instance
                                                (its state_dict holds the same tensors under every index): the
                                                tensors are checked equal and written once, under index 0 (tfm's
                                                share_layers), and `reverse` writes them under every index
                                                0..config[CONFIG_KEY]-1.
  Any rule may say "optional": true (skipped when its source tensor is absent, e.g. a bias the module may lack).
  Every source tensor must be consumed by a rule or matched by "ignore"; every tfm tensor by a rule on reverse.

Gradients (reverse_state(grad=True)): the maps are the same permutations, except that a broadcast scalar's
gradient is the sum over the width, and a shared layer's gradient (tfm accumulates all uses) is written under
every index.

Notebook 5 ("build_transformer") holds its LayerNormalization gain and shift as one scalar each, shape (1,), with
eps 1e-6. Its own formula divides by the variance, which contradicts its text and the paper; tfm uses the standard
LayerNorm, (x − mean)/sqrt(var + eps)·γ + β, and the importer broadcasts the scalar gain and shift to the width.
The import is exact for a module with the standard formula (tests/gen/notebooks.py re-states it that way).
"""

import importlib.util
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tfm_safetensors, for the moved code


def _load_moved():
    """python/tfm/torch_import.py, where this tool's code lives (tfm.from_torch uses it too), loaded by path: the
    tool needs neither the built package nor its native module."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python", "tfm", "torch_import.py")
    spec = importlib.util.spec_from_file_location("tfm_torch_import", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


globals().update({k: v for k, v in vars(_load_moved()).items() if not k.startswith("__")})

if __name__ == "__main__":
    sys.exit(main())  # noqa: F821 (defined by the moved module)
