package vllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rlnode/rlnode/learner/tokenizer"
)

// The JSON bodies below follow vLLM's OpenAI-compatible server
// (vllm/entrypoints/openai/completion/protocol.py and
// chat_completion/protocol.py). Only the fields the client sends or reads
// are declared; the decoder ignores fields it does not know.
//
// Every sampling parameter is sent explicitly, the neutral ones too (top_k
// -1, min_p 0, penalties off): vLLM fills a field the request leaves out
// from the model's generation_config.json (many set top_k, top_p or a
// repetition penalty), which would sample from a distribution other than
// the one the request names.

// completionRequest is the body of POST /v1/completions with the prompt
// given as token ids.
type completionRequest struct {
	Model             string   `json:"model"`
	Prompt            []int    `json:"prompt"`
	MaxTokens         int      `json:"max_tokens"`
	N                 int      `json:"n"`
	Temperature       float64  `json:"temperature"`
	TopP              float64  `json:"top_p"`
	TopK              int      `json:"top_k"` // -1: off
	MinP              float64  `json:"min_p"`
	RepetitionPenalty float64  `json:"repetition_penalty"`
	PresencePenalty   float64  `json:"presence_penalty"`
	FrequencyPenalty  float64  `json:"frequency_penalty"`
	Seed              *int64   `json:"seed,omitempty"`
	Stop              []string `json:"stop,omitempty"`
	StopTokenIDs      []int    `json:"stop_token_ids,omitempty"`
	Logprobs          int      `json:"logprobs"` // 0: the sampled token's logprob only
	ReturnTokenIDs    bool     `json:"return_token_ids"`
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	Model               string              `json:"model"`
	Messages            []tokenizer.Message `json:"messages"`
	MaxCompletionTokens int                 `json:"max_completion_tokens"`
	N                   int                 `json:"n"`
	Temperature         float64             `json:"temperature"`
	TopP                float64             `json:"top_p"`
	TopK                int                 `json:"top_k"` // -1: off
	MinP                float64             `json:"min_p"`
	RepetitionPenalty   float64             `json:"repetition_penalty"`
	PresencePenalty     float64             `json:"presence_penalty"`
	FrequencyPenalty    float64             `json:"frequency_penalty"`
	Seed                *int64              `json:"seed,omitempty"`
	Stop                []string            `json:"stop,omitempty"`
	StopTokenIDs        []int               `json:"stop_token_ids,omitempty"`
	Logprobs            bool                `json:"logprobs"`
	TopLogprobs         int                 `json:"top_logprobs"`
	ReturnTokenIDs      bool                `json:"return_token_ids"`
	AddGenerationPrompt bool                `json:"add_generation_prompt"`
}

// completionResponse is the body /v1/completions answers with. With
// return_token_ids every choice carries the prompt's and its own token ids.
type completionResponse struct {
	ID      string             `json:"id"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
}

type completionChoice struct {
	Index          int                `json:"index"`
	Text           string             `json:"text"`
	Logprobs       *completionLogprob `json:"logprobs"`
	FinishReason   *string            `json:"finish_reason"`
	TokenIDs       []int              `json:"token_ids"`
	PromptTokenIDs []int              `json:"prompt_token_ids"`
}

type completionLogprob struct {
	TokenLogprobs []*float64 `json:"token_logprobs"`
}

// chatResponse is the body /v1/chat/completions answers with: the prompt's
// token ids at the top, each choice's token ids and logprobs inside it.
type chatResponse struct {
	ID             string       `json:"id"`
	Model          string       `json:"model"`
	Choices        []chatChoice `json:"choices"`
	PromptTokenIDs []int        `json:"prompt_token_ids"`
}

type chatChoice struct {
	Index   int `json:"index"`
	Message struct {
		Role    string  `json:"role"`
		Content *string `json:"content"`
	} `json:"message"`
	Logprobs *struct {
		Content []struct {
			Token   string   `json:"token"`
			Logprob *float64 `json:"logprob"`
		} `json:"content"`
	} `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	TokenIDs     []int   `json:"token_ids"`
}

// modelList is the body of GET /v1/models.
type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

type modelCard struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"`
	OwnedBy     string  `json:"owned_by,omitempty"`
	Root        string  `json:"root,omitempty"`
	Parent      *string `json:"parent"`
	MaxModelLen int     `json:"max_model_len,omitempty"`
}

// loadLoRARequest is the body of POST /v1/load_lora_adapter (the server
// runs with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True).
// LoadInplace replaces an adapter of the same name in place.
type loadLoRARequest struct {
	LoRAName    string `json:"lora_name"`
	LoRAPath    string `json:"lora_path"`
	LoadInplace bool   `json:"load_inplace"`
}

// unloadLoRARequest is the body of POST /v1/unload_lora_adapter.
type unloadLoRARequest struct {
	LoRAName string `json:"lora_name"`
}

// The weight-transfer endpoints (vllm/entrypoints/serve/dev/rlhf) take
// backend-specific JSON under these keys; the server runs with
// VLLM_SERVER_DEV_MODE=1 and --weight-transfer-config (without it every
// call but the body checks answers 500 "Weight transfer not configured").
type initWeightTransferRequest struct {
	InitInfo any `json:"init_info"`
}

type updateWeightsRequest struct {
	UpdateInfo any `json:"update_info"`
}

type finishWeightUpdateRequest struct {
	WeightVersion string `json:"weight_version"`
}

// collectiveRPCRequest is the body of POST /collective_rpc
// (vllm/entrypoints/serve/dev/rpc, VLLM_SERVER_DEV_MODE=1): the worker
// method, its keyword arguments, and how long the engine waits for the
// workers, in seconds.
type collectiveRPCRequest struct {
	Method  string  `json:"method"`
	Kwargs  any     `json:"kwargs"`
	Timeout float64 `json:"timeout,omitempty"`
}

// reloadWeightsKwargs are the keyword arguments of the model runner's
// reload_weights: the checkpoint directory to read (it replaces the
// model's path for this and later reloads), in checkpoint (Hugging Face)
// format, not vLLM's kernel format.
type reloadWeightsKwargs struct {
	WeightsPath        string `json:"weights_path"`
	IsCheckpointFormat bool   `json:"is_checkpoint_format"`
}

// checkRPCResults checks a collective_rpc answer: vLLM answers an empty
// 200 when the call returned None, else {"results": [one per worker]}
// (reload_weights returns None: null each).
func checkRPCResults(body []byte) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	var r struct {
		Results []json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Results == nil {
		return fmt.Errorf("answer %s is not collective_rpc's {\"results\": [...]}", clip(string(body)))
	}
	return nil
}

// errorMessage pulls the message out of an error body. vLLM answers errors
// as {"error": {"message": ...}} (newer) or {"object": "error",
// "message": ...} (older); FastAPI's own errors are {"detail": ...}.
// Anything else is quoted as text, cut short.
func errorMessage(body []byte) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &e) == nil {
		if len(e.Error) > 0 {
			var inner struct {
				Message string `json:"message"`
			}
			if json.Unmarshal(e.Error, &inner) == nil && inner.Message != "" {
				return inner.Message
			}
			var s string
			if json.Unmarshal(e.Error, &s) == nil && s != "" {
				return s
			}
		}
		if e.Message != "" {
			return e.Message
		}
		if len(e.Detail) > 0 {
			var s string
			if json.Unmarshal(e.Detail, &s) == nil {
				return s
			}
			return clip(string(e.Detail))
		}
	}
	return clip(strings.TrimSpace(string(body)))
}

// clip shortens s to at most 200 bytes for an error message.
func clip(s string) string {
	const max = 200
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
