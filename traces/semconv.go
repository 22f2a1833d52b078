package traces

import (
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// SemconvVersion is the OpenTelemetry semantic conventions version whose
// GenAI attributes spans are read and written with.
const SemconvVersion = "1.41.0"

// Attribute keys of the GenAI conventions, from the OpenTelemetry Go
// module's semconv package.
var (
	AttrOperation      = string(semconv.GenAIOperationNameKey)
	AttrProvider       = string(semconv.GenAIProviderNameKey)
	AttrRequestModel   = string(semconv.GenAIRequestModelKey)
	AttrResponseModel  = string(semconv.GenAIResponseModelKey)
	AttrConversationID = string(semconv.GenAIConversationIDKey)
	AttrAgentName      = string(semconv.GenAIAgentNameKey)
	AttrInputTokens    = string(semconv.GenAIUsageInputTokensKey)
	AttrOutputTokens   = string(semconv.GenAIUsageOutputTokensKey)
	AttrInputMessages  = string(semconv.GenAIInputMessagesKey)
	AttrOutputMessages = string(semconv.GenAIOutputMessagesKey)
	AttrFinishReasons  = string(semconv.GenAIResponseFinishReasonsKey)
	AttrToolName       = string(semconv.GenAIToolNameKey)
	AttrToolCallID     = string(semconv.GenAIToolCallIDKey)
	AttrToolArguments  = string(semconv.GenAIToolCallArgumentsKey)
	AttrToolResult     = string(semconv.GenAIToolCallResultKey)
	AttrErrorType      = string(semconv.ErrorTypeKey)
	AttrServiceName    = string(semconv.ServiceNameKey)
)

// Operation names of the GenAI conventions.
var (
	OpChat           = semconv.GenAIOperationNameChat.Value.AsString()
	OpTextCompletion = semconv.GenAIOperationNameTextCompletion.Value.AsString()
	OpExecuteTool    = semconv.GenAIOperationNameExecuteTool.Value.AsString()
	OpInvokeAgent    = semconv.GenAIOperationNameInvokeAgent.Value.AsString()
)

// rlnode's attributes: what RL needs on top of the conventions. A reward
// named NAME is the attribute rlnode.reward.NAME (a number) with its reason
// in rlnode.reward.NAME.reason.
const (
	AttrRunID          = "rlnode.run.id"
	AttrStep           = "rlnode.step"
	AttrEpisode        = "rlnode.episode"
	AttrTurn           = "rlnode.turn"
	AttrPolicy         = "rlnode.policy"
	AttrWeightVersion  = "rlnode.weight_version"
	AttrPromptTokenIDs = "rlnode.prompt_token_ids"
	AttrOutputTokenIDs = "rlnode.output_token_ids"
	AttrOutputLogprobs = "rlnode.output_logprobs"
	AttrRewardPrefix   = "rlnode.reward."
	AttrReasonSuffix   = ".reason"
	// AttrReference is the reference answer a trace's final answer is
	// checked against (JSON of a verify.Reference, or a bare answer).
	AttrReference = "rlnode.reference"
	// AttrSource names the store partition explicitly (a resource or span
	// attribute).
	AttrSource = "rlnode.source"
	// AttrInsertedTokens, on a model call, counts its output token ids
	// that the model did not write: results of tools that ran while the
	// call was generating, placed between its engine calls (a tool
	// episode's turn). AttrInsertedStart and AttrInsertedEnd, on each such
	// execute_tool span, say where its result is: output tokens [start,
	// end) of the model call of its trace and turn.
	AttrInsertedTokens = "rlnode.inserted_tokens"
	AttrInsertedStart  = "rlnode.inserted_tokens.start"
	AttrInsertedEnd    = "rlnode.inserted_tokens.end"
	// AttrEndShared (true), on a run's model call, says its end is the
	// engine call's, which every request of the batch shares: the engine
	// did not say when this call's own sequence was done.
	AttrEndShared = "rlnode.call.end_shared"
)
