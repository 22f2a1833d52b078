// Package traces records what agents and models do as spans (OpenTelemetry
// GenAI semantic conventions v1.41.0 plus rlnode attributes for RL), keeps
// them in a Parquet store partitioned by date and source, and scores them
// with rewards. It collects through an HTTP middleware (a recording
// OpenAI-compatible proxy, or rlnode's own server) and an OTLP/HTTP
// receiver. It does not train: train/ reads the store.
package traces
