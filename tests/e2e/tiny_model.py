# -*- coding: utf-8 -*-
"""Write a tiny random Llama checkpoint (config, sharded safetensors, tokenizer with a chat template).

No hub download: the tokenizer is a byte-level BPE trained here on a few sentences.
Usage: python tiny_model.py OUTPUT_DIR
"""
import sys

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")
CORPUS = ["你好，世界。Hello world, this is a tiny model.", "The fleet rolls out one host at a time.",
          "GPU memory budget, KV cache, weights and overhead.", "谢谢！再见。"] * 50


def make(out_dir):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<s>", "</s>", "<unk>", "<pad>"]
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=512, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)

    config = LlamaConfig(vocab_size=fast.vocab_size, hidden_size=256, intermediate_size=512,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, bos_token_id=fast.bos_token_id,
                         eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
                         torch_dtype="bfloat16", tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out_dir, max_shard_size="400KB", safe_serialization=True)


if __name__ == "__main__":
    make(sys.argv[1])
