"""One module per session file format a replay reads (transcripts.py detects the format and
calls the reader): pi.py, claude_code.py, codex.py, gemini_cli.py, mini_swe_agent.py, swe_agent.py,
openhands.py, cline.py, opencode.py; common.py holds the ``Transcript`` they make, the safe file read and the one parse
every reader starts from.

These modules read files; they never touch a store or a session.
"""
