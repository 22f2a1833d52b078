// Drives rlnode's trace collection with official clients, unchanged:
//   node client.mjs openai BASE_URL MODEL   the openai package through the recording proxy
//   node client.mjs otlp BASE_URL           the OpenTelemetry JS SDK's OTLP/HTTP exporters
//                                           (protobuf, then JSON) into /v1/traces
// and prints, as JSON, what the client saw (ids, answers, token ids), for
// the Go test to compare with the store.
import OpenAI from "openai";
import { TracerProvider, SimpleSpanProcessor } from "@opentelemetry/sdk-trace";
import { OTLPTraceExporter as ProtoExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { OTLPTraceExporter as JSONExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { SpanStatusCode, trace, context } from "@opentelemetry/api";

const [mode, base, model] = process.argv.slice(2);

async function viaOpenAI() {
  const client = new OpenAI({
    baseURL: base + "/v1",
    apiKey: "unused",
    defaultHeaders: { "X-Rlnode-Agent": "scripted-agent", "X-Rlnode-Conversation": "conv-1" },
  });
  const messages = [{ role: "user", content: "Tom has 3 apples." }];
  const chat = await client.chat.completions.create({
    model, messages, max_tokens: 6, temperature: 0, logprobs: true, return_token_ids: true,
  });
  const c = chat.choices[0];
  const out = {
    chat: {
      content: c.message.content, finish: c.finish_reason, tokenIDs: c.token_ids,
      promptTokenIDs: chat.prompt_token_ids, logprobs: c.logprobs.content.map((t) => t.logprob),
      usage: chat.usage,
    },
  };
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 5, temperature: 0, stream: true,
    stream_options: { include_usage: true }, return_token_ids: true,
  });
  let text = "", ids = [], usage = null;
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      text += ch.delta.content ?? "";
      ids.push(...(ch.token_ids ?? []));
    }
    if (chunk.usage) usage = chunk.usage;
  }
  out.chatStream = { content: text, tokenIDs: ids, usage };
  const comp = await client.completions.create({ model, prompt: "2 + 2 =", max_tokens: 4, temperature: 0, return_token_ids: true });
  out.completion = { text: comp.choices[0].text, tokenIDs: comp.choices[0].token_ids };
  return out;
}

// One agent turn as instrumented code exports it: invoke_agent with a chat
// call and two tool calls (one failing) under it, a reward on the root.
async function exportTurn(Exporter, agent) {
  const exporter = new Exporter({ url: base + "/v1/traces" });
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ "service.name": agent }),
    spanProcessors: [new SimpleSpanProcessor({ exporter })],
  });
  const tracer = provider.getTracer("client.mjs");
  const root = tracer.startSpan("invoke_agent " + agent, {
    attributes: { "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent, "rlnode.reward.final": 0.75, "rlnode.reward.final.reason": "judge" },
  });
  const ctx = trace.setSpan(context.active(), root);
  const chat = tracer.startSpan("chat gpt-x", {
    attributes: {
      "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-x", "gen_ai.usage.input_tokens": 12,
      "gen_ai.usage.output_tokens": 4, "gen_ai.input.messages": JSON.stringify([{ role: "user", parts: [{ type: "text", content: "2+2?" }] }]),
      "gen_ai.output.messages": JSON.stringify([{ role: "assistant", parts: [{ type: "text", content: "4" }], finish_reason: "stop" }]),
      "rlnode.output_token_ids": [52, 3], "rlnode.turn": 1,
    },
  }, ctx);
  chat.end();
  const ok = tracer.startSpan("execute_tool calc", { attributes: { "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "calc", "gen_ai.tool.call.result": "4" } }, ctx);
  ok.end();
  const bad = tracer.startSpan("execute_tool search", { attributes: { "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search" } }, ctx);
  bad.recordException(new TypeError("no network"));
  bad.setStatus({ code: SpanStatusCode.ERROR, message: "no network" });
  bad.end();
  root.end();
  await provider.forceFlush();
  await provider.shutdown();
  return { traceId: root.spanContext().traceId, rootSpanId: root.spanContext().spanId, chatSpanId: chat.spanContext().spanId };
}

async function viaOTLP() {
  const out = { proto: await exportTurn(ProtoExporter, "agent-proto"), json: await exportTurn(JSONExporter, "agent-json") };
  const bad = await fetch(base + "/v1/traces", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ resourceSpans: [{ scopeSpans: [{ spans: [{ traceId: "xyz", spanId: "0102030405060708", name: "s" }] }] }] }),
  });
  out.malformed = { status: bad.status, body: await bad.text() };
  return out;
}

const result = mode === "openai" ? await viaOpenAI() : await viaOTLP();
console.log(JSON.stringify(result));
