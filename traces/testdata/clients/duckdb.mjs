// Reads a trace store with DuckDB, as a data lake would: every Parquet file
// under the folder, the date and source partitions taken from the Hive-style
// folder names.  node duckdb.mjs STORE  prints one JSON object per
// (date, source): spans, traces, tokens and the names of rewards stored.
import { DuckDBInstance } from "@duckdb/node-api";

const store = process.argv[2];
const db = await DuckDBInstance.create(":memory:");
const conn = await db.connect();
const reader = await conn.runAndReadAll(`
  SELECT CAST(date AS VARCHAR) AS date, source, count(*)::INTEGER AS spans,
         count(DISTINCT trace_id)::INTEGER AS traces,
         coalesce(sum(output_tokens), 0)::INTEGER AS output_tokens,
         list_sort(list_distinct(flatten(list(list_transform(coalesce(rewards, []), r -> r.name))))) AS rewards
  FROM read_parquet('${store.replaceAll("'", "''")}/*/*/*.parquet', hive_partitioning = true)
  GROUP BY ALL ORDER BY date, source`);
for (const row of reader.getRowObjectsJson()) console.log(JSON.stringify(row));
