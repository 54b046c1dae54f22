/**
 * Flows on SQLite (rules: ../flows.ts). The flow is written inside one IMMEDIATE transaction
 * together with its jobs; children release their parent through the triggers of migration 0003,
 * inside whichever transaction settles them.
 */
import type Database from "better-sqlite3";
import { effectiveState, type ChildFailurePolicy, type ErrorInfo, type FlowInfo, type FlowNodeSpec, type JobState } from "../../core/job.js";
import type { Json } from "../../core/json.js";

interface FlowRow {
  parent_id: string | null;
  parent_queue: string | null;
  on_child_failure: ChildFailurePolicy | null;
  pending_children: number;
}

interface ChildRow {
  child_id: string;
  child_queue: string;
  child_name: string;
  state: JobState | null;
  result: string | null;
  error: string | null;
  live_state: JobState | null;
  run_at: number | null;
}

export class SqliteFlows {
  private readonly markParent: Database.Statement<[number, ChildFailurePolicy, string]>;
  private readonly markChild: Database.Statement<[string, string, string]>;
  private readonly addChild: Database.Statement<[string, string, number, string, string]>;
  private readonly flowRow: Database.Statement<[string], FlowRow & { queue: string }>;
  private readonly childRows: Database.Statement<[string], ChildRow>;
  private readonly waitingChildren: Database.Statement<[], { queue: string; n: number }>;
  private readonly waitingChildrenOf: Database.Statement<[string], { queue: string; n: number }>;

  constructor(db: Database.Database, prefix: string) {
    const jobs = `${prefix}jobs`;
    // A parent stays out of every claim until its children have settled (see the triggers).
    this.markParent = db.prepare(`UPDATE ${jobs} SET state = 'waiting-children', pending_children = ?, on_child_failure = ? WHERE id = ?`);
    this.markChild = db.prepare(`UPDATE ${jobs} SET parent_id = ?, parent_queue = ? WHERE id = ?`);
    this.addChild = db.prepare(`INSERT INTO ${prefix}flow_children (parent_id, child_id, position, child_queue, child_name) VALUES (?, ?, ?, ?, ?)`);
    this.flowRow = db.prepare(`SELECT queue, parent_id, parent_queue, on_child_failure, pending_children FROM ${jobs} WHERE id = ?`);
    this.childRows = db.prepare(
      `SELECT c.child_id, c.child_queue, c.child_name, c.state, c.result, c.error, j.state AS live_state, j.run_at
       FROM ${prefix}flow_children c LEFT JOIN ${jobs} j ON j.id = c.child_id
       WHERE c.parent_id = ? ORDER BY c.position`,
    );
    /* Plan: SCAN conveyor_jobs USING COVERING INDEX conveyor_jobs_waiting_children */
    this.waitingChildren = db.prepare(`SELECT queue, count(*) AS n FROM ${jobs} WHERE state = 'waiting-children' GROUP BY queue`);
    this.waitingChildrenOf = db.prepare(`SELECT queue, count(*) AS n FROM ${jobs} WHERE state = 'waiting-children' AND queue = ? GROUP BY queue`);
  }

  /** Links a freshly stored flow (inside the transaction that stored its jobs). */
  link(nodes: readonly FlowNodeSpec[], childCount: readonly number[]): void {
    nodes.forEach((node, i) => {
      if (childCount[i]! > 0) this.markParent.run(childCount[i]!, node.onChildFailure, node.spec.id);
      if (node.parent === null) return;
      const parent = nodes[node.parent]!.spec;
      this.markChild.run(parent.id, parent.queue, node.spec.id);
      this.addChild.run(parent.id, node.spec.id, i, node.spec.queue, node.spec.name);
    });
  }

  flow(id: string, queue: string | undefined, now: number): FlowInfo | null {
    const row = this.flowRow.get(id);
    if (row === undefined || (queue !== undefined && row.queue !== queue)) return null;
    const children = row.on_child_failure === null ? [] : this.childRows.all(id);
    return {
      parent: row.parent_id === null ? null : { id: row.parent_id, queue: row.parent_queue! },
      onChildFailure: row.on_child_failure,
      pendingChildren: row.pending_children,
      children: children.map((c) => ({
        id: c.child_id,
        queue: c.child_queue,
        name: c.child_name,
        state: c.state ?? (c.live_state === null ? "cancelled" : effectiveState(c.live_state, c.run_at!, now)),
        settled: c.state !== null,
        result: c.result === null ? null : (JSON.parse(c.result) as Json),
        error: c.error === null ? null : (JSON.parse(c.error) as ErrorInfo),
      })),
    };
  }

  /** Parents waiting for their children, per queue (for stats). */
  waitingCounts(queue: string | undefined): Array<{ queue: string; n: number }> {
    return queue === undefined ? this.waitingChildren.all() : this.waitingChildrenOf.all(queue);
  }
}
