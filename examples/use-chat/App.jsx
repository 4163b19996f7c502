// A chat page on `askloop serve` with the AI SDK's `useChat`: the agent's
// questions (ask_user) are answered in the page, and tool calls that need
// approval are approved or declined there. See README.md to run it.
import { useState } from 'react';
import { createRoot } from 'react-dom/client';
import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai';

// Where the server is and which agent to talk to, from the page's address:
// index.html?server=http://127.0.0.1:4111&agent=assistant&token=...
const params = new URLSearchParams(window.location.search);
const server = params.get('server') ?? 'http://127.0.0.1:4111';
const agent = params.get('agent') ?? 'assistant';
// A token in the page is for trying askloop on your own machine only: a real
// front end gets its requests signed by its own backend.
const token = params.get('token');

// The chat keeps its id across reloads, so that `resume` can re-attach to a
// stream still running on the server.
const chatId = sessionStorage.getItem('askloop-chat-id') ?? crypto.randomUUID();
sessionStorage.setItem('askloop-chat-id', chatId);

const transport = new DefaultChatTransport({
  api: `${server}/chat/${encodeURIComponent(agent)}`,
  headers: token ? { Authorization: `Bearer ${token}` } : {},
});

function App() {
  const { messages, sendMessage, addToolApprovalResponse, status, error, clearError } = useChat({
    id: chatId,
    transport,
    // After every approval of the message is decided, send them by itself.
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    // Re-attach to a stream of this chat that outlived the page.
    resume: true,
  });
  const [input, setInput] = useState('');
  const busy = status === 'submitted' || status === 'streaming';

  const answer = (runId, toolCallId, resumeData) =>
    sendMessage(undefined, { body: { runId, toolCallId, resumeData } });

  return (
    <main>
      <h1>askloop · {agent}</h1>
      <ol className="messages" aria-live="polite">
        {messages.map((message) => (
          <li key={message.id} className={`message ${message.role}`}>
            <span className="role">{message.role === 'user' ? 'You' : agent}</span>
            {message.parts.map((part, i) => (
              <Part
                key={i}
                part={part}
                message={message}
                busy={busy}
                onAnswer={answer}
                onDecide={(id, approved) => addToolApprovalResponse({ id, approved })}
              />
            ))}
          </li>
        ))}
      </ol>
      {error && (
        <p className="error" role="alert">
          {error.message} <button onClick={clearError}>Dismiss</button>
        </p>
      )}
      <form
        onSubmit={(event) => {
          event.preventDefault();
          if (!input.trim()) return;
          sendMessage({ text: input });
          setInput('');
        }}
      >
        <label htmlFor="prompt">Message</label>
        <input id="prompt" value={input} onChange={(e) => setInput(e.target.value)} disabled={busy} />
        <button type="submit" disabled={busy || !input.trim()}>
          Send
        </button>
      </form>
      <p className="status">Status: {status}</p>
    </main>
  );
}

// One part of a message: text, a question waiting for its answer, or a tool
// call (waiting for approval, done, or declined).
function Part({ part, message, busy, onAnswer, onDecide }) {
  if (part.type === 'text') {
    return <p className="text">{part.text}</p>;
  }
  if (part.type === 'data-tool-call-suspended') {
    const { runId, toolCallId, suspendPayload } = part.data;
    const call = message.parts.find((p) => p.toolCallId === toolCallId);
    const answered = call?.state === 'output-available';
    return (
      <Question
        question={suspendPayload.question}
        options={suspendPayload.options ?? []}
        answered={answered ? call.output : undefined}
        disabled={busy}
        onAnswer={(value) => onAnswer(runId, toolCallId, value)}
      />
    );
  }
  if (part.type.startsWith('tool-') && part.type !== 'tool-ask_user') {
    const name = part.type.slice('tool-'.length);
    return (
      <div className="tool">
        <code>{name}</code> <code>{JSON.stringify(part.input)}</code>{' '}
        {part.state === 'approval-requested' ? (
          <span className="decide">
            <button onClick={() => onDecide(part.approval.id, true)} disabled={busy}>
              Approve
            </button>
            <button onClick={() => onDecide(part.approval.id, false)} disabled={busy}>
              Decline
            </button>
          </span>
        ) : (
          <span className="state">{part.state}</span>
        )}
      </div>
    );
  }
  return null;
}

function Question({ question, options, answered, disabled, onAnswer }) {
  const [text, setText] = useState('');
  return (
    <fieldset className="question">
      <legend>{question}</legend>
      {answered !== undefined ? (
        <p className="answered">{outputText(answered)}</p>
      ) : options.length > 0 ? (
        options.map((option) => (
          <button key={option.label} onClick={() => onAnswer(option.label)} disabled={disabled}>
            {option.label}
          </button>
        ))
      ) : (
        <form
          onSubmit={(event) => {
            event.preventDefault();
            onAnswer(text);
          }}
        >
          <input aria-label="Your answer" value={text} onChange={(e) => setText(e.target.value)} />
          <button type="submit" disabled={disabled || !text.trim()}>
            Answer
          </button>
        </form>
      )}
    </fieldset>
  );
}

// What a tool returned, as text: askloop's tool output is `{content, isError}`.
function outputText(output) {
  if (typeof output === 'string') return output;
  if (typeof output?.content === 'string') return output.content;
  return JSON.stringify(output);
}

createRoot(document.getElementById('root')).render(<App />);
