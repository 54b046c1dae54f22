// The job handlers the container runs (copied to /app/handlers.js by the Dockerfile).
// The default export maps job names to handlers; `queues` names the queues they serve, so
// `conveyor serve --handlers` and the worker below agree without repeating --queue.
export const queues = ["email"];

export default {
  "send-welcome": async (job, ctx) => {
    if (ctx.signal.aborted) throw ctx.signal.reason;
    // Your mail provider goes here; the return value is stored as the job's result.
    return { sent: true, userId: job.data.userId };
  },
};
