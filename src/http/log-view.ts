/** The job log as the HTTP API shows it (`GET /v1/jobs/{id}/logs`). */
import type { JobRecord } from "../core/job.js";
import type { JobLogLine } from "../core/job-log.js";
import type { JsonSchema } from "./schema.js";
import { iso } from "./views.js";

export interface JobLogView {
  jobId: string;
  queue: string;
  lines: Array<{ at: string | null; attempt: number; line: string }>;
}

export function toJobLogView(job: JobRecord, lines: readonly JobLogLine[]): JobLogView {
  return { jobId: job.id, queue: job.queue, lines: lines.map((l) => ({ at: iso(l.at), attempt: l.attempt, line: l.line })) };
}

export const jobLogViewSchema: JsonSchema = {
  title: "JobLog",
  type: "object",
  required: ["jobId", "queue", "lines"],
  properties: {
    jobId: { type: "string" },
    queue: { type: "string" },
    lines: {
      type: "array",
      items: {
        type: "object",
        required: ["at", "attempt", "line"],
        properties: {
          at: { type: ["string", "null"], format: "date-time", description: "When the store received the line." },
          attempt: { type: "integer", description: "The attempt that wrote it (1 for the first)." },
          line: { type: "string" },
        },
      },
    },
  },
};
