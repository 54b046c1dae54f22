/**
 * What the PostgreSQL tests that read plans share: a node of `EXPLAIN (…, FORMAT JSON)` with the
 * fields they read, every node of a plan, the backend's rendered statements, and claim.sql's
 * parameter types for a PREPARE (claim-one.sql takes the same).
 */
import type { PostgresBackend } from "../../src/backend/postgres/index.js";

/** A node of an EXPLAIN (ANALYZE, FORMAT JSON) plan, with the fields these tests read. */
export type PlanNode = {
  "Node Type": string;
  Operation?: string;
  "Relation Name"?: string;
  "Index Name"?: string;
  "Index Cond"?: string;
  "Actual Rows"?: number;
  "Actual Loops"?: number;
  "Rows Removed by Join Filter"?: number;
  "Shared Hit Blocks"?: number;
  "Shared Read Blocks"?: number;
  Plans?: PlanNode[];
};

/** Every node of a plan, depth first. */
export const nodes = (n: PlanNode): PlanNode[] => [n, ...(n.Plans ?? []).flatMap(nodes)];

/** The backend's statements as it sends them (queries/*.sql rendered, and those built from them), by name. */
export const statementsOf = (b: PostgresBackend): Record<string, string> => (b as unknown as { sql: Record<string, string> }).sql;

/** claim.sql's and claim-one.sql's $1..$12: now, queues, names, limit, lease ms, worker id, host, pid, flow_checked, starts_at_once, first and last queue. */
export const CLAIM_PARAMETER_TYPES = "bigint, text[], text[], int, bigint, text, text, int, boolean, int, text, text";
