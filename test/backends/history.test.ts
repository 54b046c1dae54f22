/**
 * The one rule behind a completed job's history on PostgreSQL, SQLite and Redis (src/backend/history.ts):
 * their complete statements and script do not store the completed attempt, reads add it from the
 * job's own fields, and a job completed by an earlier version, which stored it, shows it once.
 */
import { describe, expect, it } from "vitest";
import { withCompletedAttempt } from "../../src/backend/history.js";
import type { AttemptRecord } from "../../src/core/job.js";

const attempt = (n: number) => ({ attempt: n, workerId: "w", host: "h", pid: 1, startedAt: 10 * n, finishedAt: 10 * n + 5 });
const failed: AttemptRecord = { ...attempt(1), outcome: "failed", error: { name: "E", message: "m", stack: null } };

describe("withCompletedAttempt", () => {
  it("appends the completed attempt after the stored ones", () => {
    expect(withCompletedAttempt([], attempt(1))).toEqual([{ ...attempt(1), outcome: "completed", error: null }]);
    expect(withCompletedAttempt([failed], attempt(2))).toEqual([failed, { ...attempt(2), outcome: "completed", error: null }]);
  });

  it("keeps a history whose last record is this attempt's completion as stored (an earlier version wrote it)", () => {
    const stored: AttemptRecord[] = [failed, { ...attempt(2), outcome: "completed", error: null }];
    expect(withCompletedAttempt(stored, attempt(2))).toBe(stored);
  });

  it("appends when the last record is an earlier attempt's completion (a replay later completed again)", () => {
    const stored: AttemptRecord[] = [{ ...attempt(1), outcome: "completed", error: null }];
    expect(withCompletedAttempt(stored, attempt(2))).toHaveLength(2);
  });
});
