// Starts `commdsl lsp` (the language server: diagnostics while typing, explain on hover, formatting) for
// .comm documents. The command comes from the `commdsl.server.command` setting.
"use strict";

const vscode = require("vscode");
const { LanguageClient, TransportKind } = require("vscode-languageclient/node");

let client;

function activate(context) {
  const [command, ...args] = vscode.workspace.getConfiguration("commdsl").get("server.command", ["commdsl", "lsp"]);
  const server = { command, args, transport: TransportKind.stdio };
  client = new LanguageClient(
    "commdsl",
    "commdsl",
    { run: server, debug: server },
    { documentSelector: [{ scheme: "file", language: "commdsl" }, { scheme: "untitled", language: "commdsl" }] },
  );
  context.subscriptions.push(client);
  return client.start();
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
