/**
 * GET /api/jobs/:id — the job's state and typed result. In Next.js 15 and later a dynamic
 * segment's params arrive as a Promise.
 */
import { conveyor, sendWelcome } from "../../../../lib/conveyor.js";

export const runtime = "nodejs";

export async function GET(_request: Request, context: { params: Promise<{ id: string }> }): Promise<Response> {
  const { id } = await context.params;
  const job = sendWelcome.narrow(await conveyor().queue.getJob(id));
  if (!job) return Response.json({ error: `no welcome job ${id}` }, { status: 404 });
  return Response.json({ state: job.state, sent: job.result?.sent ?? null });
}
