/**
 * A Next.js App Router route handler (app/api/signup/route.ts): POST answers 202 Accepted with
 * the job id at once; the worker process sends the email. Route handlers take and return the Web
 * platform's Request and Response, so this file needs nothing from `next` itself.
 */
import { PayloadValidationError } from "conveyor-jobs";
import { conveyor, sendWelcome } from "../../../lib/conveyor.js";

/** Node.js, not the Edge runtime: the database drivers need it. */
export const runtime = "nodejs";

export async function POST(request: Request): Promise<Response> {
  let body: unknown;
  try {
    body = await request.json();
  } catch {
    return Response.json({ error: 'the body must be JSON: { "userId": "…" }' }, { status: 400 });
  }
  try {
    const { id } = await conveyor().queue.add(sendWelcome, body as { userId: string });
    return Response.json(
      { jobId: id, statusUrl: `/api/jobs/${encodeURIComponent(id)}` },
      { status: 202, headers: { location: `/api/jobs/${encodeURIComponent(id)}` } },
    );
  } catch (error) {
    if (error instanceof PayloadValidationError) return Response.json({ error: "invalid payload", issues: error.issues }, { status: 422 });
    throw error;
  }
}
