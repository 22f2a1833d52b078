// Drives rlnode's native OpenAI-compatible server's tool calling with the
// official openai client, unchanged. Usage:
//   node tools.mjs BASE_URL MODEL QUESTION TOOL_JSON
// Prints one JSON object with what the client saw; the Go test checks it.
import OpenAI from 'openai';

const [baseURL, model, question, toolJSON] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'not-needed', maxRetries: 0, timeout: 60_000 });
const tools = [JSON.parse(toolJSON)];
const messages = [{ role: 'user', content: question }];
const out = {};

const chat = await client.chat.completions.create({ model, messages, tools, tool_choice: 'auto', temperature: 0, max_tokens: 64 });
const msg = chat.choices[0].message;
out.chat = { content: msg.content, finish: chat.choices[0].finish_reason, toolCalls: msg.tool_calls ?? null };

// Streamed, gathered by the client's own stream helper.
const stream = client.chat.completions.stream({ model, messages, tools, temperature: 0, max_tokens: 64 });
const final = await stream.finalChatCompletion();
out.stream = {
  content: final.choices[0].message.content,
  finish: final.choices[0].finish_reason,
  toolCalls: final.choices[0].message.tool_calls ?? null,
};

const none = await client.chat.completions.create({ model, messages, tools, tool_choice: 'none', temperature: 0, max_tokens: 16 });
out.none = { content: none.choices[0].message.content, toolCalls: none.choices[0].message.tool_calls ?? null, finish: none.choices[0].finish_reason };

// The tool's answer goes back with the call in the history.
const followUp = await client.chat.completions.create({
  model, tools, temperature: 0, max_tokens: 4,
  messages: [...messages, msg, { role: 'tool', tool_call_id: msg.tool_calls?.[0]?.id ?? 'none', content: '5' }],
});
out.followUp = { promptTokens: followUp.usage.prompt_tokens };

async function failure(fn) {
  try {
    await fn();
    return null;
  } catch (e) {
    return { status: e.status ?? null, name: e.constructor.name, param: e.param ?? null, message: e.message };
  }
}
out.required = await failure(() => client.chat.completions.create({ model, messages, tools, tool_choice: 'required', max_tokens: 4 }));
out.badTool = await failure(() => client.chat.completions.create({
  model, messages, max_tokens: 4, tools: [{ type: 'function', function: { name: 'no spaces allowed' } }],
}));

console.log(JSON.stringify(out));
