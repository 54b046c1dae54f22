/**
 * Flows (`queue.addFlow`): the checks every backend shares, written once.
 *
 * A flow is a tree of jobs. The store keeps, per parent, how many children have not settled and
 * the failure policy; per child, its parent; and one outcome record per (parent, child), written
 * when the child settles, so the parent can read its children's results even after the children
 * themselves were pruned. A child's final settle and its parent's release happen in one atomic step
 * of the store (SQL backends: a trigger on the jobs table, so every path that settles a job, now
 * or in the future, releases the parent; Redis: the settling script).
 */
import { InvalidInputError } from "../core/errors.js";
import type { EnqueueResult } from "./contract.js";
import type { FlowNodeSpec } from "../core/job.js";

/** The error a parent dies with when a child failed under the "fail" policy (name as stored). */
export const CHILD_FAILED_ERROR = "ChildFailedError";

/** Checks a flattened flow (parents before children) and returns how many children each node has. */
export function checkFlow(nodes: readonly FlowNodeSpec[], crossQueue: boolean): number[] {
  if (nodes.length === 0) throw new InvalidInputError("a flow needs at least one job");
  const childCount = nodes.map(() => 0);
  const ids = new Set<string>();
  nodes.forEach((node, i) => {
    const { spec } = node;
    // A job of a flow must outlive its settle: its outcome is copied to its parent then, and a
    // parent's cancel cascades from its row. (The parent keeps the copy: pruning a child later is fine.)
    if (spec.retainCompletedMs === 0 || spec.retainDeadMs === 0) {
      throw new InvalidInputError(
        `flow job "${spec.name}" has removeOnComplete or removeOnFail true; every job of a flow must outlive its ` +
          `settle so its outcome reaches its parent: use { ageMs: N } with N >= 1 instead`,
        { field: spec.retainCompletedMs === 0 ? "options.removeOnComplete" : "options.removeOnFail" },
      );
    }
    const key = JSON.stringify([spec.queue, spec.id]);
    if (ids.has(key)) throw new InvalidInputError(`job id ${JSON.stringify(spec.id)} appears twice in one flow; give each job its own id`, { field: "jobId" });
    ids.add(key);
    if (spec.dedup !== undefined) {
      throw new InvalidInputError("a job of a flow cannot have a dedup window (options.dedup); dedup the flow by the parent's jobId instead", {
        field: "options.dedup",
      });
    }
    if (node.parent === null) {
      if (i !== 0) throw new InvalidInputError("a flow has one root: only its first node may lack a parent");
      return;
    }
    if (!Number.isInteger(node.parent) || node.parent < 0 || node.parent >= i) {
      throw new InvalidInputError(`flow node ${i} names parent ${node.parent}; a parent must come before its children`);
    }
    const parent = nodes[node.parent]!.spec;
    if (!crossQueue && parent.queue !== spec.queue) {
      throw new InvalidInputError(
        `this backend keeps a flow in one queue (capabilities.flows is "within-queue"); child "${spec.name}" is in queue ` +
          `"${spec.queue}", its parent in "${parent.queue}"`,
        { field: "queue" },
      );
    }
    childCount[node.parent]! += 1;
  });
  return childCount;
}

/** A flow is stored whole or not at all: when any id existed, every result says so (the others are not stored either). */
export function flowRefused(results: readonly EnqueueResult[]): boolean {
  return results.some((r) => r.duplicate);
}
