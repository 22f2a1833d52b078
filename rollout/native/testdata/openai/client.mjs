// Drives rlnode's native OpenAI-compatible server with the official openai
// client, unchanged. Usage: node client.mjs BASE_URL MODEL
// Prints one JSON object with what the client saw; the Go test checks it.
import OpenAI from 'openai';

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'not-needed', maxRetries: 0, timeout: 60_000 });
const out = { openai: OpenAI.VERSION ?? null };

out.models = (await client.models.list()).data.map((m) => m.id);

// Completions, greedy, with logprobs and vLLM's return_token_ids.
const c = await client.completions.create({
  model, prompt: 'Tom has 3 apples.', max_tokens: 8, temperature: 0, logprobs: 2, return_token_ids: true,
});
out.completion = {
  text: c.choices[0].text,
  finish: c.choices[0].finish_reason,
  tokenIDs: c.choices[0].token_ids,
  promptTokenIDs: c.choices[0].prompt_token_ids,
  logprobs: c.choices[0].logprobs.token_logprobs,
  top: c.choices[0].logprobs.top_logprobs.map((t) => Object.keys(t).length),
  usage: c.usage,
};

// The same completion streamed.
let text = '';
const ids = [];
for await (const chunk of await client.completions.create({
  model, prompt: 'Tom has 3 apples.', max_tokens: 8, temperature: 0, stream: true, return_token_ids: true,
})) {
  text += chunk.choices[0].text;
  ids.push(...(chunk.choices[0].token_ids ?? []));
}
out.completionStream = { text, tokenIDs: ids };

// Chat with sampling, a seed, two choices and top logprobs.
const messages = [{ role: 'user', content: 'What is 2 + 2?' }];
const chat = await client.chat.completions.create({
  model, messages, max_tokens: 12, temperature: 0.8, seed: 7, n: 2, logprobs: true, top_logprobs: 3, return_token_ids: true,
});
out.chat = {
  promptTokenIDs: chat.prompt_token_ids,
  choices: chat.choices.map((ch) => ({
    content: ch.message.content,
    role: ch.message.role,
    finish: ch.finish_reason,
    tokenIDs: ch.token_ids,
    logprobs: ch.logprobs.content.map((t) => t.logprob),
    top: ch.logprobs.content.map((t) => t.top_logprobs.length),
  })),
  usage: chat.usage,
};

// The same chat streamed, with usage at the end.
const streamed = [{ content: '', tokenIDs: [] }, { content: '', tokenIDs: [] }];
let usage = null;
const stream = await client.chat.completions.create({
  model, messages, max_tokens: 12, temperature: 0.8, seed: 7, n: 2, stream: true,
  stream_options: { include_usage: true }, return_token_ids: true,
});
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const ch of chunk.choices) {
    streamed[ch.index].content += ch.delta.content ?? '';
    streamed[ch.index].tokenIDs.push(...(ch.token_ids ?? []));
  }
}
out.chatStream = { choices: streamed, usage };

// Errors arrive as the client's typed errors.
async function failure(fn) {
  try {
    await fn();
    return null;
  } catch (e) {
    return { status: e.status ?? null, name: e.constructor.name, param: e.param ?? null, message: e.message };
  }
}
out.unknownModel = await failure(() => client.chat.completions.create({ model: 'no-such-model', messages, max_tokens: 2 }));
out.badField = await failure(() => client.completions.create({ model, prompt: 'x', max_tokens: 2, top_p: 3 }));

console.log(JSON.stringify(out));
