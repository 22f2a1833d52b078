package tokenizer

import "strings"

// Message is one turn of a chat: Role is "system", "user", "assistant" or
// "tool".
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// DefaultSystemPrompt is what Qwen2.5's chat template writes when the
// conversation does not open with a system message.
const DefaultSystemPrompt = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

// ChatTemplate renders msgs as Qwen2.5-Instruct's chat template does (its
// tokenizer_config.json chat_template, without tools):
//
//	<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{content}<|im_end|>\n...
//
// A leading system message replaces DefaultSystemPrompt. Consecutive "tool"
// messages share one user turn, each wrapped in <tool_response> tags. With
// addGenerationPrompt the text ends with "<|im_start|>assistant\n", where a
// model's reply begins. As in the template, a message of any other role
// renders nothing.
func ChatTemplate(msgs []Message, addGenerationPrompt bool) string {
	var b strings.Builder
	b.WriteString(IMStart + "system\n")
	if len(msgs) > 0 && msgs[0].Role == "system" {
		b.WriteString(msgs[0].Content)
	} else {
		b.WriteString(DefaultSystemPrompt)
	}
	b.WriteString(IMEnd + "\n")
	for i, m := range msgs {
		switch {
		case m.Role == "system" && i == 0:
			// written above
		case m.Role == "user" || m.Role == "system" || m.Role == "assistant":
			b.WriteString(IMStart + m.Role + "\n" + m.Content + IMEnd + "\n")
		case m.Role == "tool":
			if i == 0 || msgs[i-1].Role != "tool" {
				b.WriteString(IMStart + "user")
			}
			b.WriteString("\n<tool_response>\n" + m.Content + "\n</tool_response>")
			if i == len(msgs)-1 || msgs[i+1].Role != "tool" {
				b.WriteString(IMEnd + "\n")
			}
		}
	}
	if addGenerationPrompt {
		b.WriteString(IMStart + "assistant\n")
	}
	return b.String()
}

// EncodeChat returns the token ids of ChatTemplate(msgs, addGenerationPrompt).
// The chat markers become their special-token ids.
func (t *Tokenizer) EncodeChat(msgs []Message, addGenerationPrompt bool) []int {
	return t.Encode(ChatTemplate(msgs, addGenerationPrompt))
}
