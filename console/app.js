// app: the console's shell: sign-in with a token (kept in sessionStorage for the tab), the
// views (#/chats, #/chats/ID, #/cluster) and the navigation between them.

import { Api } from "./api.js";
import { ChatsView } from "./chats.js";
import { ClusterView } from "./cluster.js";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "chatfleet-token";

let api;
let chats;
let cluster;

function show(section) {
  for (const id of ["signin", "chats", "cluster"]) $(id).hidden = id !== section;
  $("nav").hidden = section === "signin";
  $("nav-chats").classList.toggle("active", section === "chats");
  $("nav-cluster").classList.toggle("active", section === "cluster");
}

function route() {
  if (!api) return show("signin");
  const hash = location.hash || "#/chats";
  if (hash.startsWith("#/cluster")) {
    chats.leave();
    show("cluster");
    cluster.enter();
    return;
  }
  cluster.leave();
  show("chats");
  const m = /^#\/chats\/([0-9a-f-]{36})$/.exec(hash);
  chats.enter(m ? m[1] : undefined);
}

async function signIn(token) {
  const candidate = new Api(token);
  const me = await candidate.call("GET", "/api/v2/users/me"); // 401 for a wrong token
  $("whoami").textContent = `${me.name}${me.is_admin ? " (admin)" : ""}`;
  $("whoami").dataset.user = me.id;
  sessionStorage.setItem(TOKEN_KEY, token);
  api = candidate;
  chats = new ChatsView(api);
  cluster = new ClusterView(api);
  route();
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  chats?.leave(true);
  cluster?.leave();
  api = chats = cluster = undefined;
  $("whoami").textContent = "";
  show("signin");
}

$("signin-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  $("signin-error").textContent = "";
  try {
    await signIn($("token").value.trim());
    $("token").value = "";
  } catch (err) {
    $("signin-error").textContent = err.status === 401 ? "This token is not valid." : String(err.message);
  }
});
$("signout").addEventListener("click", signOut);
window.addEventListener("hashchange", route);

const saved = sessionStorage.getItem(TOKEN_KEY);
if (saved) signIn(saved).catch(signOut);
else show("signin");
