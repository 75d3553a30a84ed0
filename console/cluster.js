// cluster: the operator's view of the deployment from GET /api/v2/admin/cluster (admin.h),
// polled every POLL_MS while shown: each worker with the chats it holds and their leases
// (heartbeat age, fresh or stale), chats per status, runnable chats awaiting an owner, the
// broker's counters (registered workers, uptime, dropped and forbidden messages), and
// the acquisitions and takeovers seen between polls (a chat held by another worker than at
// the previous poll is a takeover).

const $ = (id) => document.getElementById(id);
const POLL_MS = 1000;
const LOG_MAX = 200; // acquisition and takeover lines kept

const short = (id) => String(id ?? "").slice(0, 8);

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

export class ClusterView {
  constructor(api) {
    this.api = api;
    this.timer = undefined;
    this.owners = undefined; // chat id -> worker id at the previous poll
  }

  enter() {
    if (this.timer) return;
    const tick = async () => {
      await this.s_poll();
      if (this.timer) this.timer = setTimeout(tick, POLL_MS);
    };
    this.timer = setTimeout(tick, 0);
  }

  leave() {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  async s_poll() {
    let view;
    try {
      view = await this.api.call("GET", "/api/v2/admin/cluster");
      $("cluster-error").textContent = "";
    } catch (err) {
      $("cluster-error").textContent =
        err.status === 403 ? "The cluster view needs an admin token (user-add --admin)." : err.message;
      if (err.status === 403) this.leave();
      return;
    }
    $("lease-stale").textContent = String(view.lease_stale_ms);
    $("by-status").textContent = Object.entries(view.chats_by_status ?? {})
      .map(([k, v]) => `${k} ${v}`)
      .join(", ");
    $("awaiting").textContent = String(view.awaiting_owner ?? 0);
    const b = view.broker ?? {};
    $("broker").textContent = b.reachable
      ? `reachable, ${b.workers} worker(s) registered, up ${Math.round(b.uptime_ms / 1000)} s, ` +
        `${b.pub_out} hints and parts forwarded, ${b.dropped} dropped, ${b.forbidden} forbidden`
      : "not reachable from this gateway";
    $("broker").className = b.reachable ? "" : "error";
    this.s_render(view.workers ?? []);
    this.s_diff(view.workers ?? []);
  }

  s_render(workers) {
    const box = $("workers");
    box.replaceChildren();
    for (const w of workers) {
      const table = document.createElement("table");
      table.setAttribute("data-worker", w.worker_id);
      const cap = document.createElement("caption");
      cap.textContent = `worker ${w.worker_id}: ${w.chats} chat(s), ${w.fresh} fresh lease(s), newest heartbeat ${w.newest_heartbeat_age_ms ?? "?"} ms ago`;
      table.append(cap);
      const head = document.createElement("tr");
      for (const h of ["chat", "owner", "status", "heartbeat age ms", "lease", "slot", "attempt"]) {
        const th = document.createElement("th");
        th.textContent = h;
        head.append(th);
      }
      table.append(head);
      for (const l of w.leases ?? []) {
        const tr = document.createElement("tr");
        tr.setAttribute("data-chat", l.chat_id);
        tr.setAttribute("data-worker", w.worker_id);
        tr.append(
          cell(short(l.chat_id)),
          cell(l.owner),
          cell(l.status),
          cell(l.heartbeat_age_ms ?? "none"),
          cell(l.fresh ? "fresh" : "stale", l.fresh ? "fresh" : "stale"),
          cell(l.slot ?? ""),
          cell(`${l.history_version}/${l.generation_attempt}`),
        );
        table.append(tr);
      }
      box.append(table);
    }
  }

  s_diff(workers) {
    const now = new Map();
    for (const w of workers) for (const l of w.leases ?? []) now.set(l.chat_id, w.worker_id);
    if (this.owners) {
      for (const [chat, worker] of now) {
        const before = this.owners.get(chat);
        if (before === worker) continue;
        const li = document.createElement("li");
        li.setAttribute("data-chat", chat);
        li.setAttribute("data-to", worker);
        if (before) li.setAttribute("data-from", before);
        li.className = before ? "takeover" : "acquired";
        li.textContent = `${new Date().toISOString().slice(11, 23)} ${before ? "takeover" : "acquired"} chat ${short(chat)}: ${before ? `${short(before)} -> ` : ""}${short(worker)}`;
        $("takeovers").prepend(li);
      }
      while ($("takeovers").children.length > LOG_MAX) $("takeovers").lastChild.remove();
    }
    this.owners = now;
  }
}
