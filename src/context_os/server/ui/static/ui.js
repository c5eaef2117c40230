// context_os web view: keyboard navigation and the as-of sliders. The pages work without it.
"use strict";

function go(href) { if (href) window.location.href = href; }

function rel(name) {
  const a = document.querySelector(`a[rel="${name}"]`);
  return a ? a.getAttribute("href") : null;
}

function setupRows() {
  const table = document.querySelector("table[data-nav]");
  if (!table) return;
  const rows = Array.from(table.querySelectorAll("tbody tr[data-href]"));
  if (!rows.length) return;
  let at = Math.max(0, rows.findIndex((r) => r.classList.contains("focus")));
  const select = (k) => {
    rows[at].classList.remove("selected");
    at = Math.min(rows.length - 1, Math.max(0, k));
    rows[at].classList.add("selected");
    rows[at].scrollIntoView({ block: "nearest" });
  };
  select(at);
  rows.forEach((r, k) => r.addEventListener("click", (e) => {
    if (e.target.closest("a, summary, details")) return;
    select(k);
    go(r.dataset.href);
  }));
  document.addEventListener("keydown", (e) => {
    if (e.target.closest("input, textarea, select") || e.metaKey || e.ctrlKey || e.altKey) return;
    if (e.key === "j" || e.key === "ArrowDown") { select(at + 1); e.preventDefault(); }
    else if (e.key === "k" || e.key === "ArrowUp") { select(at - 1); e.preventDefault(); }
    // Enter on a link, a button or a state-change list's summary does what that does (unfold it)
    else if (e.key === "Enter" && !e.target.closest("a, button, summary")) go(rows[at].dataset.href);
    else if (e.key === "d" && rows[at].dataset.turn > 1) {
      const url = new URL(rows[at].dataset.href, window.location.href);
      const turn = Number(rows[at].dataset.turn);
      go(`diff?session=${encodeURIComponent(url.searchParams.get("session"))}&a=${turn - 1}&b=${turn}`);
    }
  });
}

function setupPager() {
  if (document.querySelector("table[data-nav]")) return;
  document.addEventListener("keydown", (e) => {
    if (e.target.closest("input, textarea, select") || e.metaKey || e.ctrlKey || e.altKey) return;
    if (e.key === "ArrowLeft" || e.key === "[") go(rel("prev"));
    else if (e.key === "ArrowRight" || e.key === "]") go(rel("next"));
    else if (e.key === "u") go(rel("up"));
    else if (e.key === "d") go(rel("diff"));
  });
}

function setupAsOf() {
  const form = document.getElementById("asof");
  if (!form) return;
  form.querySelectorAll("input[type=range]").forEach((input) => {
    const out = form.querySelector(`output[for="${input.name}"]`);
    const show = () => {
      out.textContent = input.hasAttribute("data-time") ? new Date(Number(input.value)).toISOString() : input.value;
    };
    input.addEventListener("input", show);
    input.addEventListener("change", () => form.submit());
  });
}

document.addEventListener("DOMContentLoaded", () => {
  setupRows();
  setupPager();
  setupAsOf();
});
