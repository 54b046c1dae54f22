/** The job log as the HTTP API shows it (`GET /v1/jobs/{id}/logs`). */
import type { JobRecord } from "../core/job.js";
import type { JobLogLine } from "../core/job-log.js";
import { Nullable, Type, type Static } from "./typed-schema.js";
import { iso } from "./views.js";

export const jobLogViewSchema = Type.Object(
  {
    jobId: Type.String(),
    queue: Type.String(),
    lines: Type.Array(
      Type.Object({
        at: Nullable(Type.String({ format: "date-time" }), { description: "When the store received the line." }),
        attempt: Type.Integer({ description: "The attempt that wrote it (1 for the first)." }),
        line: Type.String(),
      }),
    ),
  },
  { title: "JobLog" },
);
export type JobLogView = Static<typeof jobLogViewSchema>;

export function toJobLogView(job: JobRecord, lines: readonly JobLogLine[]): JobLogView {
  return { jobId: job.id, queue: job.queue, lines: lines.map((l) => ({ at: iso(l.at), attempt: l.attempt, line: l.line })) };
}
