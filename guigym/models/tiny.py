"""Build a tiny Qwen2.5-VL-architecture model from scratch (random weights, local tokenizer).

No weights are downloaded: the model has the Qwen2.5-VL architecture (Bai et al., 2025,
"Qwen2.5-VL Technical Report": ViT with window attention + 2x2 patch merger + M-RoPE decoder) at
toy size, a byte-level BPE tokenizer trained here on a small built-in corpus, the Qwen special
tokens (``<|im_start|>``, ``<|vision_start|>``, ``<|image_pad|>``, ``<|box_start|>``, ...) and a
ChatML chat template that renders each image as ``<|vision_start|><|image_pad|><|vision_end|>``
(the processor then expands ``<|image_pad|>`` to one token per merged 2x2 patch group).

The saved directory loads with ``Qwen2_5_VLForConditionalGeneration.from_pretrained(path)`` /
``AutoModelForImageTextToText`` and ``AutoProcessor.from_pretrained(path)``.

    python -m guigym.models.tiny /tmp/tiny-qwen25vl
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional, Sequence, Union

#: Qwen2.5-VL's special tokens, in Qwen's id order (ids here start right after the BPE vocab)
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]

#: ChatML as used by Qwen2.5-VL: text parts verbatim, image parts as a vision span; a default
#: system turn when none is given; ``add_generation_prompt`` opens an assistant turn.
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] in ('image', 'image_url') -%}"
    "{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

# the corpus: action strings in the canonical and UI-TARS formats plus English instructions
_WORDS = ("button submit ok cancel yes no next previous search login password username email "
          "checkbox link tab menu item text box field select option dropdown date time the a to of "
          "and in on with for click type enter press scroll drag wait done fail hello test Bob blue "
          "red green first last left right up down home back open app screen task page").split()
_INSTRUCTIONS = [
    "Click on the button.", "Click the \"Submit\" button.", "Enter \"Bob\" into the text field.",
    "Select yes and click Submit.", "Type your username and password, then press login.",
    "Scroll down and click the last link.", "Find the email from Alice and reply.",
    "Open the settings app and turn on wifi.", "Drag the item to the left box.",
]


def corpus() -> list[str]:
    """Small built-in training text for the BPE tokenizer (deterministic)."""
    lines = list(_INSTRUCTIONS)
    for i in range(0, 220, 7):
        j = (i * 13) % 211
        w = _WORDS[i % len(_WORDS)]
        lines += [
            f"click(x={i}, y={j})", f'click(element="{i % 50}")', f'type(text="{w}")',
            'hotkey(keys=["ctrl", "c"])', f"scroll(dy={i - 100})", f'done(answer="{w}")',
            'press(key="Enter")', "wait(seconds=1)", "fail()",
            f"Thought: I should {w} the {_WORDS[(i + 3) % len(_WORDS)]}.\nAction: "
            f"click(start_box='<|box_start|>({i},{j})<|box_end|>')",
            f"Action: click(point='<point>{i} {j}</point>')", f"Action: type(content='{w}')",
            f"Action: scroll(point='<point>{j} {i}</point>', direction='down')",
            "Action: hotkey(key='ctrl c')", f"Action: finished(content='{w}')",
            f'do(action="Tap", element=[{i}, {j}, {i + 20}, {j + 20}])',
            f'do(action="Click", element="{i % 40}")', f'exit(message="{w}")',
            f"Click on the {w} {_WORDS[(i + 5) % len(_WORDS)]}.",
        ]
    return lines


def build_tokenizer(vocab_size: int = 800, texts: Optional[Sequence[str]] = None):
    """Byte-level BPE trained on :func:`corpus` (plus ``texts``), with the Qwen special tokens appended.

    ``texts``: extra training text, e.g. the rendered prompts and replies of demonstrations
    (:mod:`guigym.train.demos`), so that the words of the task's pages (labels, roles, ids) become
    single tokens: a model then matches a quoted label against a line of the page as one token
    against one token. The byte alphabet is always included, so any text still encodes.

    Returns a ``PreTrainedTokenizerFast`` with eos ``<|im_end|>``, pad ``<|endoftext|>`` and the
    chat template set.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(corpus()) + list(texts or ()), trainer=trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        unk_token=None, bos_token=None, padding_side="left", clean_up_tokenization_spaces=False,
        extra_special_tokens={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
                              "vision_bos_token": "<|vision_start|>", "vision_eos_token": "<|vision_end|>"},
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_config(hidden: int = 64, layers: int = 2, tokenizer=None, **_ignored):
    """The ``Qwen2_5_VLConfig`` :func:`build` uses (``tokenizer``: the one from
    :func:`build_tokenizer`, built when omitted). Sizes as in :func:`build`."""
    from transformers import Qwen2_5_VLConfig

    tokenizer = tokenizer if tokenizer is not None else build_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    vocab = ((len(tokenizer) + 63) // 64) * 64
    heads = 4
    head_dim = hidden // heads
    half = head_dim // 2  # M-RoPE splits the rotary half-dim into (temporal, height, width) sections
    section = [half - 2 * (half // 3), half // 3, half // 3]
    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
            num_attention_heads=heads, num_key_value_heads=2, max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section},
            bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"],
            tie_word_embeddings=True,
        ),
        vision_config=dict(
            depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=hidden, patch_size=14,
            spatial_merge_size=2, temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1],
        ),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    config.bos_token_id = ids["<|endoftext|>"]
    config.eos_token_id = ids["<|im_end|>"]
    config.pad_token_id = ids["<|endoftext|>"]
    return config


def build(path: Union[str, Path], seed: int = 0, hidden: int = 64, layers: int = 2,
          max_pixels: int = 28 * 28 * 16, generation_defaults: Optional[dict] = None,
          vocab_size: int = 800, tokenizer_texts: Optional[Sequence[str]] = None) -> Path:
    """Write a tiny random-weight Qwen2.5-VL (model + tokenizer + processor) to ``path``.

    Sizes: text decoder ``hidden`` wide, ``layers`` deep, 4 query / 2 key-value heads; vision tower
    2 blocks of width 32 with 14 px patches, 2x2 merging (one LLM token per 28x28 px). The image
    processor's ``max_pixels`` (default 16 merged tokens' worth) keeps a 160x210 screenshot to at
    most 16 vision tokens. ``generation_defaults``: extra ``generation_config.json`` fields (e.g.
    ``{"repetition_penalty": 1.5, "top_k": 3}``, as real checkpoints ship sampling defaults; tests
    use it to check they never reach sampling). ``vocab_size`` / ``tokenizer_texts``: see
    :func:`build_tokenizer` (defaults: the built-in corpus, 800 tokens). Returns ``path``.
    """
    import torch
    from transformers import GenerationConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(vocab_size, tokenizer_texts)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    config = tiny_config(hidden=hidden, layers=layers, tokenizer=tokenizer)
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=ids["<|endoftext|>"], eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"], **{"do_sample": False, **(generation_defaults or {})})
    model.save_pretrained(path)
    image_processor = Qwen2VLImageProcessorPil(min_pixels=28 * 28 * 4, max_pixels=max_pixels, patch_size=14,
                                               temporal_patch_size=2, merge_size=2)
    image_processor.save_pretrained(path)
    tokenizer.save_pretrained(path)
    # transformers 5 builds Qwen2_5_VLProcessor only with torchvision (its video processor needs it);
    # write the processor/video configs by hand so AutoProcessor loads the directory where
    # torchvision is installed. guigym itself only needs the tokenizer + image processor
    # (see guigym.models.hf_policy).
    video = {k: v for k, v in json.loads((path / "preprocessor_config.json").read_text()).items()
             if k != "image_processor_type"}
    video["video_processor_type"] = "Qwen2VLVideoProcessor"
    (path / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2))
    (path / "processor_config.json").write_text(json.dumps({"processor_class": "Qwen2_5_VLProcessor"}, indent=2))
    return path


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else "tiny-qwen25vl"))
