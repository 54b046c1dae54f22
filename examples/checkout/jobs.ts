/**
 * The checkout from the seeds, moved out of the request: charge the card, render the invoice,
 * send the email — each a job with its own queue, latency and ways to fail.
 */
import { setTimeout as delay } from "node:timers/promises";
import { z } from "zod";
import { defineJob, RetryLater, UnrecoverableError, type Queue } from "conveyor-jobs";

/** Downstream "services" with realistic latency and failure rates (scaled down ~5x). */
const sleep = (ms: number, signal: AbortSignal) => delay(ms, undefined, { signal });
const jitter = (base: number) => Math.round(base * (0.6 + Math.random() * 0.8));

export class PaymentGatewayUnavailable extends Error {
  override name = "PaymentGatewayUnavailable";
}
export class CardDeclined extends UnrecoverableError {
  override name = "CardDeclined";
}

export const chargePayment = defineJob("charge-payment", z.object({ orderId: z.string(), amountCents: z.number().int().positive(), card: z.string() }), {
  attempts: 4,
  backoff: { type: "exponential", delayMs: 200, maxDelayMs: 2_000 },
  timeoutMs: 2_000,
});

export const renderInvoice = defineJob("render-invoice", z.object({ orderId: z.string() }), {
  attempts: 3,
  backoff: { type: "exponential", delayMs: 300, maxDelayMs: 3_000 },
  timeoutMs: 3_000,
});

export const sendEmail = defineJob("send-email", z.object({ orderId: z.string(), to: z.string().email() }), {
  attempts: 5,
  backoff: { type: "exponential", delayMs: 250, maxDelayMs: 2_000 },
});

/** The handlers, wired to the queues that the next step goes to. */
export function checkoutHandlers(queues: { documents: Queue; email: Queue }) {
  return {
    payments: [
      chargePayment.handle(async (job, ctx) => {
        // The idempotency key makes a re-delivered charge (after a crash) a no-op at the gateway.
        if (!(await ctx.once(`charge:${job.data.orderId}`, 86_400_000))) return { charged: false, reason: "already charged" };
        await sleep(jitter(240), ctx.signal);
        if (job.data.card.endsWith("0002")) throw new CardDeclined(`card ending ${job.data.card.slice(-4)} was declined`);
        if (Math.random() < 0.15) throw new PaymentGatewayUnavailable("gateway answered 503 Service Unavailable");
        await queues.documents.add(renderInvoice, { orderId: job.data.orderId }, { jobId: `invoice:${job.data.orderId}` });
        await queues.email.add(sendEmail, { orderId: job.data.orderId, to: `buyer+${job.data.orderId}@example.com` }, { jobId: `email:${job.data.orderId}` });
        return { charged: true, amountCents: job.data.amountCents };
      }),
    ],
    documents: [
      renderInvoice.handle(async (job, ctx) => {
        const pages = 12;
        for (let page = 1; page <= pages; page++) {
          await sleep(jitter(700 / pages), ctx.signal);
          if (page % 4 === 0) await ctx.progress({ page, pages });
        }
        return { pdf: `invoices/${job.data.orderId}.pdf`, pages };
      }),
    ],
    email: [
      sendEmail.handle(async (job, ctx) => {
        await sleep(jitter(160), ctx.signal);
        if (Math.random() < 0.1) throw new RetryLater(500, "email provider answered 429 Too Many Requests; retrying in 500 ms");
        return { messageId: `msg_${job.id}` };
      }),
    ],
  };
}
