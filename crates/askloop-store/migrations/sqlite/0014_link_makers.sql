-- Who made each answer link: the name its maker acted under (an API
-- token's name, a person a trusted proxy named, the CLI's user). A link
-- answers as its recipient whoever follows it, so the recipient alone says
-- nothing of who chose to answer as them; the maker is shown where links
-- are listed and recorded beside the recipient in the answer's resolution.
--
-- NULL when nothing named the maker (a server without tokens, a link the
-- server made for a notification) and for links made before this column.
-- Only added: an older askloop reads the columns it names and never this
-- one, and the links it makes have no maker, as on a server without tokens.

ALTER TABLE answer_links ADD COLUMN made_by TEXT;
