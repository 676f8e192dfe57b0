// The field table (Note [Field table] in fk/gen/config.h): the one alias table.
#include <algorithm>
#include <set>

#include "fk/gen/config.h"

namespace fk::gen {

const std::vector<FieldSpec>& field_table() {
  static const std::vector<FieldSpec> table = [] {
    std::vector<FieldSpec> t = {
        {"architectures", FieldType::kStringList, {}, "HF model classes, e.g. LlamaForCausalLM"},
        {"attention_bias", FieldType::kBool, {}, "q/k/v/o projections carry a bias"},
        {"attention_out_bias", FieldType::kBool, {}, "o_proj carries a bias, apart from q/k/v (seed_oss; defaults to attention_bias)"},
        {"attn_logit_softcapping", FieldType::kNumberOrNull, {}, "attention scores -> c * tanh(s / c) (gemma2) or null"},
        {"final_logit_softcapping", FieldType::kNumberOrNull, {}, "logits -> c * tanh(x / c) (gemma2) or null"},
        {"query_pre_attn_scalar", FieldType::kPosNumber, {}, "softmax scale is its inverse square root (gemma)"},
        {"attention_multiplier", FieldType::kNumberOrNull, {}, "softmax scale itself, replacing head_dim^-0.5 (granite) or null"},
        {"embedding_multiplier", FieldType::kPosNumber, {}, "embedding rows are multiplied by it (granite)"},
        {"residual_multiplier", FieldType::kPosNumber, {}, "each residual branch is multiplied by it before the add (granite)"},
        {"logits_scaling", FieldType::kPosNumber, {}, "logits are divided by it (granite)"},
        {"rope_local_base_freq", FieldType::kPosNumber, {}, "RoPE base of the sliding-window layers (gemma3)"},
        {"sliding_window_pattern", FieldType::kPosInt, {}, "every n-th layer is a full-attention one (gemma3)"},
        {"sliding_window_size", FieldType::kIntOrNull, {}, "legacy duplicate of sliding_window (gemma2) or null"},
        {"first_k_dense_replace", FieldType::kNonNegInt, {}, "the first n layers have a dense MLP (deepseek_v3)"},
        {"kv_lora_rank", FieldType::kPosInt, {}, "rank of the compressed key/value latent (MLA)"},
        {"moe_layer_freq", FieldType::kPosInt, {}, "every n-th layer past first_k_dense_replace is MoE (deepseek_v3)"},
        {"n_group", FieldType::kPosInt, {}, "expert groups of grouped top-k routing (deepseek_v3)"},
        {"n_shared_experts", FieldType::kNonNegInt, {}, "shared experts beside the routed ones (deepseek_v3)"},
        {"q_lora_rank", FieldType::kIntOrNull, {}, "rank of the query LoRA (MLA) or null (a plain q_proj)"},
        {"qk_nope_head_dim", FieldType::kPosInt, {}, "per-head query/key dimension without rope (MLA)"},
        {"qk_rope_head_dim", FieldType::kPosInt, {}, "per-head query/key dimension with rope (MLA)"},
        {"rope_interleave", FieldType::kBool, {}, "rope pairs are interleaved (x0, x1), ... (GPT-J style; deepseek_v3)"},
        {"routed_scaling_factor", FieldType::kPosNumber, {}, "routed experts' weights are scaled by it (deepseek_v3)"},
        {"scoring_func", FieldType::kString, {}, "router scores: \"sigmoid\" or \"softmax\" (deepseek_v3)"},
        {"topk_group", FieldType::kPosInt, {}, "expert groups kept by grouped top-k routing (deepseek_v3)"},
        {"topk_method", FieldType::kString, {}, "routing method (deepseek_v3: \"noaux_tc\", \"greedy\", \"group_limited_greedy\")"},
        {"v_head_dim", FieldType::kPosInt, {}, "per-head value dimension (MLA)"},
        {"head_dim", FieldType::kIntOrNull, {}, "per-head dimension (null: derived)"},
        {"hidden_act", FieldType::kString, {"hidden_activation"}, "MLP activation"},
        {"hidden_size", FieldType::kPosInt, {"n_embd", "d_model"}, "model width"},
        {"intermediate_size", FieldType::kPosInt, {"n_inner", "ffn_dim", "ffn_hidden_size"}, "MLP width"},
        {"max_position_embeddings", FieldType::kPosInt, {"n_positions"}, "longest position"},
        {"decoder_sparse_step", FieldType::kPosInt, {}, "every n-th layer is sparse (MoE); qwen3_moe"},
        {"max_window_layers", FieldType::kNonNegInt, {}, "layers below this use sliding-window attention (qwen2)"},
        {"layer_types", FieldType::kStringList, {}, "per-layer attention: \"sliding_attention\" or \"full_attention\" (gpt_oss)"},
        {"layer_norm_eps", FieldType::kPosNumber, {"layer_norm_epsilon"}, "LayerNorm epsilon (encoders)"},
        {"mlp_bias", FieldType::kBool, {}, "MLP projections carry a bias"},
        {"mlp_only_layers", FieldType::kIntList, {}, "layers with a dense MLP instead of experts (qwen3_moe)"},
        {"deepstack_visual_indexes", FieldType::kIntList, {}, "vision blocks whose output a deepstack merger passes to the text model (qwen3_vl_vision)"},
        {"num_position_embeddings", FieldType::kPosInt, {}, "rows of a vision tower's learned square position table (qwen3_vl_vision)"},
        {"fullatt_block_indexes", FieldType::kIntList, {}, "vision blocks attending over whole frames, the others inside windows (qwen2_5_vl_vision)"},
        {"window_size", FieldType::kPosInt, {}, "pixels a side of a vision attention window (qwen2_5_vl_vision)"},
        {"out_hidden_size", FieldType::kPosInt, {}, "the vision merger's output width, the text model's hidden size (qwen2_5_vl_vision)"},
        {"tokens_per_second", FieldType::kPosNumber, {}, "video frames' temporal rope positions per second (qwen2_5_vl; the VLM's video rope index)"},
        {"model_type", FieldType::kString, {}, "HF model type, selects the descriptor"},
        {"moe_intermediate_size", FieldType::kPosInt, {}, "expert MLP width"},
        {"norm_topk_prob", FieldType::kBool, {}, "renormalise the top-k routing weights to sum to 1"},
        {"num_attention_heads", FieldType::kPosInt, {"n_head", "num_heads", "n_heads"}, "query heads"},
        {"num_experts", FieldType::kPosInt, {"num_local_experts", "n_routed_experts"}, "routed experts"},
        {"num_experts_per_tok", FieldType::kPosInt, {"moe_topk", "experts_per_token"}, "experts per token"},
        {"num_hidden_layers", FieldType::kPosInt, {"n_layer", "num_layers", "n_layers", "depth"}, "decoder layers"},
        {"num_key_value_heads", FieldType::kPosInt, {"num_kv_heads", "n_head_kv", "n_kv_heads"}, "key/value heads (GQA)"},
        {"rms_norm_eps", FieldType::kPosNumber, {"norm_eps"}, "RMSNorm epsilon"},
        {"rope_scaling", FieldType::kRopeScaling, {}, "RoPE scaling (llama3, linear, yarn, longrope) or null"},
        {"original_max_position_embeddings", FieldType::kIntOrNull, {}, "pretraining context of a longrope model (phi3) or null"},
        {"position_embedding_type", FieldType::kString, {}, "\"absolute\" (a learned table) or relative_key(_query) (bert)"},
        {"partial_rotary_factor", FieldType::kPosNumber, {}, "fraction of each head that RoPE rotates (rotary_dim = int(head_dim * it))"},
        {"rope_theta", FieldType::kPosNumber, {"rotary_emb_base", "rope_base"}, "RoPE base"},
        {"sliding_window", FieldType::kIntOrNull, {}, "sliding-window size or null"},
        {"swiglu_limit", FieldType::kPosNumber, {}, "clamp of the experts' SwiGLU gate and up halves (gpt_oss)"},
        {"tie_word_embeddings", FieldType::kBool, {}, "lm_head shares the embedding weight"},
        {"torch_dtype", FieldType::kDType, {"dtype"}, "parameter dtype"},
        {"pad_token_id", FieldType::kAnyIntOrNull, {}, "padding token id; RoBERTa-style encoders (xlm-roberta) number positions from it + 1"},
        {"type_vocab_size", FieldType::kNonNegInt, {}, "token-type (segment) embedding rows (bert; 0: none)"},
        {"image_size", FieldType::kPosInt, {}, "square input images of image_size x image_size pixels (vision encoders)"},
        {"num_channels", FieldType::kPosInt, {"in_channels"}, "image channels (vision encoders; 3 for RGB)"},
        {"embed_dim", FieldType::kPosInt, {}, "the vision tower's width where hidden_size is the merger's output (qwen2_vl_vision)"},
        {"mlp_ratio", FieldType::kPosNumber, {}, "MLP width as a multiple of the tower width (qwen2_vl_vision)"},
        {"in_chans", FieldType::kPosInt, {}, "legacy image-channel key transformers does not read (qwen2_vl_vision; must equal in_channels)"},
        {"spatial_patch_size", FieldType::kPosInt, {}, "legacy patch-size key transformers does not read (qwen2_vl_vision; must equal patch_size)"},
        {"spatial_merge_size", FieldType::kPosInt, {}, "side of the patch windows the merger folds into one token (Qwen-VL towers)"},
        {"temporal_patch_size", FieldType::kPosInt, {}, "frames per patch of the 3-D patch embedding (Qwen-VL towers)"},
        {"patch_size", FieldType::kPosInt, {}, "patch embedding kernel = stride (vision encoders)"},
        {"pooler_act", FieldType::kString, {}, "activation after the pooler's dense (vit)"},
        {"pooler_output_size", FieldType::kIntOrNull, {}, "width of the pooler's output (vit; null: hidden_size)"},
        {"qkv_bias", FieldType::kBool, {}, "query/key/value projections carry a bias (vision encoders)"},
        {"pooling_type", FieldType::kString, {}, "embedding output: the model's own pooler, or cls/mean/last (set by `add --pooling` only)"},
        {"pooling_normalize", FieldType::kBool, {}, "L2-normalise the pooled vectors (set by `add --normalize` only)"},
        {"multi_vector_dim", FieldType::kNonNegInt, {}, "width of the per-token vectors of a multi-vector embedding model (0: none; set by `add --multi-vector` only)"},
        {"sparse_head", FieldType::kBool, {}, "per-token lexical weights of a sparse embedding model (set by `add --sparse` only)"},
        {"head_bias", FieldType::kBool, {}, "the token heads' linears carry a bias (set by `add --head-bias` only)"},
        {"drop_special_tokens", FieldType::kBool, {}, "the token heads drop BOS/EOS (set by `add --drop-special-tokens` only)"},
        {"query_bias", FieldType::kBool, {}, "q_proj carries a bias (dinov3_vit)"},
        {"key_bias", FieldType::kBool, {}, "k_proj carries a bias (dinov3_vit)"},
        {"value_bias", FieldType::kBool, {}, "v_proj carries a bias (dinov3_vit)"},
        {"proj_bias", FieldType::kBool, {}, "the attention's output projection carries a bias (dinov3_vit)"},
        {"num_register_tokens", FieldType::kNonNegInt, {}, "learned register tokens after the class token (dinov3_vit)"},
        {"layerscale_value", FieldType::kPosNumber, {}, "initial value of the layer scales (dinov3_vit; the weights are parameters)"},
        {"use_gated_mlp", FieldType::kBool, {}, "a gated MLP act(gate(x)) * up(x) (dinov3_vit)"},
        {"vision_use_head", FieldType::kBool, {}, "the vision tower's multihead-attention pooling head (siglip_vision_model, siglip2_vision_model)"},
        {"num_patches", FieldType::kPosInt, {}, "rows of the learned square position table, resized to every image's patch grid (siglip2_vision_model)"},
        {"serve_image_size", FieldType::kPosInt, {}, "the resolution a vision encoder serves (set by `add --image-size` only)"},
        {"is_decoder", FieldType::kBool, {}, "causal self-attention: an encoder family run as a decoder (BertLMHeadModel, bert2bert)"},
        {"add_cross_attention", FieldType::kBool, {}, "decoder layers cross-attend to encoder_hidden_states"},
        {"use_sliding_window", FieldType::kBool, {}, "whether sliding_window applies (qwen2)"},
        {"vocab_size", FieldType::kPosInt, {"n_vocab", "padded_vocab_size"}, "vocabulary size"},
    };
    std::sort(t.begin(), t.end(), [](const FieldSpec& a, const FieldSpec& b) { return a.name < b.name; });
    return t;
  }();
  return table;
}

const FieldSpec* find_field(const std::string& key) {
  for (const auto& f : field_table()) {
    if (f.name == key) return &f;
    for (const auto& a : f.aliases)
      if (a == key) return &f;
  }
  return nullptr;
}

std::string expected_text(FieldType t) {
  switch (t) {
    case FieldType::kPosInt: return "positive integer";
    case FieldType::kNonNegInt: return "non-negative integer";
    case FieldType::kIntOrNull: return "positive integer or null";
    case FieldType::kAnyIntOrNull: return "integer or null";
    case FieldType::kPosNumber: return "positive number";
    case FieldType::kNumberOrNull: return "positive number or null";
    case FieldType::kBool: return "boolean";
    case FieldType::kString: return "string";
    case FieldType::kStringList: return "array of strings";
    case FieldType::kIntList: return "array of non-negative integers";
    case FieldType::kDType: return "one of \"bfloat16\", \"float16\", \"float32\"";
    case FieldType::kRopeScaling: return "object or null";
  }
  return "?";
}

const std::map<std::string, std::vector<std::string>>& rope_scaling_keys() {
  static const std::map<std::string, std::vector<std::string>> keys = {
      {"default", {"mrope_interleaved", "mrope_section"}},
      {"linear", {"factor"}},
      {"llama3", {"factor", "high_freq_factor", "low_freq_factor", "original_max_position_embeddings"}},
      // transformers' legacy name of default rope with mrope sections (Qwen2-VL, Qwen2.5-VL configs)
      {"mrope", {"mrope_interleaved", "mrope_section"}},
      {"longrope", {"attention_factor", "factor", "long_factor", "original_max_position_embeddings", "short_factor"}},
      {"yarn", {"beta_fast", "beta_slow", "factor", "mscale", "mscale_all_dim", "original_max_position_embeddings", "truncate"}},
  };
  return keys;
}

const std::set<std::string>& tool_only_keys() {
  static const std::set<std::string> keys = {
      // hub and library bookkeeping
      "_name_or_path", "_commit_hash", "_attn_implementation", "_attn_implementation_autoset", "auto_map",
      "transformers_version", "transformers.js_config", "torchscript", "return_dict", "output_attentions",
      "output_hidden_states", "use_cache", "cache_implementation", "output_past",
      // tokenizer and generation defaults
      "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id", "tokenizer_class",
      "prefix", "bad_words_ids", "task_specific_params",
      // generation defaults transformers 4.x wrote into every config (now generation_config.json)
      "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
      "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
      "encoder_no_repeat_ngram_size", "num_return_sequences", "output_scores", "return_dict_in_generate",
      "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
      "suppress_tokens", "begin_suppress_tokens",
      // TensorFlow/XLA-era flags PyTorch ignores
      "use_bfloat16", "xla_device",
      // task heads' label maps and problem types (the generated model is the backbone + LM head)
      "id2label", "label2id", "num_labels", "problem_type", "finetuning_task",
      // training only (dropout is off at inference; initialisation and router losses do not run)
      "initializer_range", "attention_dropout", "hidden_dropout", "embd_pdrop", "resid_pdrop", "attn_pdrop",
      "attention_probs_dropout_prob", "hidden_dropout_prob", "classifier_dropout", "residual_dropout", "gradient_checkpointing",
      "router_aux_loss_coef", "output_router_logits", "router_jitter_noise", "aux_loss_alpha", "seq_aux",
  };
  return keys;
}

}  // namespace fk::gen
