#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Writes localmap's man pages from the public C headers, so they cannot go stale:
#  - localmap(3), the overview: docs/localmap.3.in with @VERSION@ filled in and @FUNCTIONS@
#    replaced by every function (each LM_API declaration of localmap.h, each static inline helper
#    of localmap.h and localmap_mpi.h) with the first sentence of its Doxygen comment;
#  - with MAN3DIR, one page per function, MAN3DIR/<function>.3: NAME, SYNOPSIS (the declaration),
#    DESCRIPTION (the whole comment; @param and @return become PARAMETERS and RETURN VALUE),
#    ERRORS (the status codes the comment names, and those every collective, allocating or
#    handle-taking call can return, with their meanings from lm_status_t), EXAMPLE (the block of
#    docs/man-examples.txt naming the function) and SEE ALSO (localmap(3), the related pages: see
#    see_also below, and the other public headers the page names).
# tests/script_docs.sh checks the pages against the symbols the library exports; tests/script_man.sh
# (tools/check-man.py) that every SEE ALSO names pages that exist and every header named exists.
# Usage: tools/gen-manpage.sh VERSION OUTPUT [MAN3DIR]
#        tools/gen-manpage.sh --list          (the function names, one a line)
# Needs perl (perl-base, essential in Debian) and nothing else.
set -eu
cd "$(dirname "$0")/.."
if [ "${1:-}" = --list ]; then
  version=- out=- mandir=- list=1
else
  [ $# -ge 2 ] || { echo "usage: $0 VERSION OUTPUT [MAN3DIR] | --list" >&2; exit 2; }
  version=$1 out=$2 mandir=${3:-} list=0
fi
exec perl -w - "$version" "$out" "$mandir" "$list" <<'PERL'
use strict;
my ($version, $out, $mandir, $list) = @ARGV;
my @headers = ('include/localmap.h', 'include/localmap_mpi.h');
my (@funcs, %meaning, %code);

# ---------------------------------------------------------------------------------------- parse
sub add_func {
  my ($h, $section, $doc, $proto, $inline) = @_;
  $proto =~ s/\bLM_NODISCARD\s+//g;
  $proto =~ s/\bLM_API\s+//g;
  $proto =~ s/^\s*static\s+inline\s+//;
  $proto =~ s/\s+/ /g;
  $proto =~ s/\(\s+/(/g;
  $proto =~ s/\s+\)/)/g;
  my ($ret, $name, $args) = $proto =~ /^\s*(.*?)\s*\b(lm_\w+)\s*\((.*)\)\s*;\s*$/
    or die "gen-manpage: cannot parse the declaration: $proto\n";
  push @funcs, {header => $h, section => $section, doc => $doc, ret => $ret, name => $name,
                args => $args, inline => $inline};
}

for my $h (@headers) {
  open my $fh, '<', $h or die "$h: $!\n";
  my @l = <$fh>;
  close $fh;
  chomp @l;
  my $text = join("\n", @l);
  # The meaning of each status code: its /**< ... */, or the /** ... */ just before it.
  while ($text =~ /\b(LM_(?:SUCCESS|ERR_\w+))\s*=\s*(\d+)\s*,?[ \t]*(?:\/\*\*<\s*(.*?)\s*\*\/)?/g) {
    $code{$1} = $2;
    $meaning{$1} = $3 if defined $3;
  }
  while ($text =~ /\/\*\*(?!<)((?:(?!\*\/).)*)\*\/\s*(LM_ERR_\w+)\s*=/sg) {
    my ($d, $n) = ($1, $2);
    $d =~ s/\s*\n\s*\*\s*/ /g;
    $d =~ s/^\s+|\s+$//g;
    $meaning{$n} //= $d;
  }
  my ($doc, $section) = ('', $h =~ /_mpi\.h$/ ? 'MPI_Comm helpers (localmap_mpi.h)' : '');
  for (my $i = 0; $i < @l; $i++) {
    my $s = $l[$i];
    if ($s =~ m{^/\* -{10,}}) {  # a section banner: its first line is the title
      my $t = $l[$i + 1] // '';
      $t =~ s/^\s*\*\s?//;
      $t =~ s/\.(\s.*)?$//;
      $section = $t;
      $i++ while $i < $#l && $l[$i + 1] !~ m{\*/} ;
      $i++;
      $doc = '';
      next;
    }
    if ($s =~ m{^\s*/\*\*(?!<)}) {
      my @d = ($s);
      while ($d[-1] !~ m{\*/}) { $i++; push @d, $l[$i]; }
      $doc = join("\n", @d);
      next;
    }
    if ($s =~ m{^\s*/\*}) {
      $i++ while $l[$i] !~ m{\*/};
      next;
    }
    next if $s =~ /^\s*$/;
    if ($s =~ /\bLM_API\b/ && $s !~ /^\s*#/) {
      my @p = ($s);
      while ($p[-1] !~ /;/) { $i++; push @p, $l[$i]; }
      add_func($h, $section, $doc, join("\n", @p), 0);
      $doc = '';
      next;
    }
    if ($s =~ /^static inline\b/) {
      my @p = ($s);
      while ($p[-1] !~ /\{/) { $i++; push @p, $l[$i]; }
      my $p = join("\n", @p);
      $p =~ s/\s*\{.*//s;
      add_func($h, $section, $doc, "$p;", 1);
      $i++ while $l[$i] !~ /^}/;
      $doc = '';
      next;
    }
    $doc = '';
  }
}
die "gen-manpage: no functions found\n" unless @funcs;

if ($list) {
  print "$_->{name}\n" for @funcs;
  exit 0;
}

# ---------------------------------------------------------------------------------------- roff
sub esc {  # text for roff: backslashes, `code` in bold, no control character at a line start
  my ($t) = @_;
  $t =~ s/\\/\\e/g;
  $t =~ s/`([^`]*)`/\\fB$1\\fP/g;
  $t =~ s/^([.'])/\\&$1/;
  return $t;
}
sub quote { my ($t) = @_; $t =~ s/\\/\\e/g; $t =~ s/"/\\(dq/g; return "\"$t\""; }
sub trim { my ($t) = @_; $t =~ s/^\s+|\s+$//g; return $t; }

# The comment's lines, without the comment markers.
sub doc_lines {
  my ($doc) = @_;
  my @lines = split /\n/, $doc;
  for (@lines) {
    s{\s*\*/\s*$}{};
    s{^\s*/\*\*<?\s?}{} or s{^\s*\*(?: |$)}{};
  }
  return @lines;
}

# (body lines, [[param, text]...], return text) of a comment.
sub doc_parts {
  my @body;
  my @params;
  my $ret;
  my $cur = 'body';
  for my $ln (doc_lines($_[0])) {
    if ($ln =~ /^\s*\@brief\s+(.*)/) { push @body, $1; $cur = 'body'; next; }
    if ($ln =~ /^\s*\@param\s+(\w+)\s*(.*)/) { push @params, [$1, $2]; $cur = 'param'; next; }
    if ($ln =~ /^\s*\@returns?\s+(.*)/) { $ret = $1; $cur = 'return'; next; }
    next if $ln =~ /^\s*\@(?:file|def)\b/;
    if ($ln =~ /^\s*$/) { push @body, '' if $cur eq 'body'; $cur = 'body'; next; }
    if ($cur eq 'param') { $params[-1][1] .= ' ' . trim($ln); next; }
    if ($cur eq 'return') { $ret .= ' ' . trim($ln); next; }
    push @body, $ln;
  }
  return (\@body, \@params, $ret);
}

sub first_sentence {
  my ($t) = @_;
  $t =~ s/\s+/ /g;
  $t = trim($t);
  (my $p = $t) =~ s/\b(e\.g|i\.e|etc)\./$1\001/g;
  $p = $1 if $p =~ /^(.*?[^.]\.)(?: |$)/;  # (not the dots of "0 .. n")
  $p =~ s/\001/./g;
  return $p;
}

sub brief_of {
  my ($f) = @_;
  my ($body) = doc_parts($f->{doc});
  my @para;
  for (@$body) { last if $_ eq '' && @para; push @para, $_ if $_ ne ''; }
  return first_sentence(join(' ', @para));
}

# Body lines as roff: paragraphs; " tag: text" lines (one leading space) become tagged items,
# deeper-indented lines continue them; "- text" lines are bullets.
sub render_body {
  my @out;
  my $mode = 'none';
  for my $ln (@_) {
    if ($ln =~ /^\s*$/) { $mode = 'none'; next; }
    if ($ln =~ /^ (\S[^:]{0,60}?):\s+(.*)$/) {
      push @out, '.TP', '.I ' . quote($1), esc($2);
      $mode = 'item';
      next;
    }
    if ($ln =~ /^\s*- (.*)$/) {
      push @out, '.IP \(bu 2', esc($1);
      $mode = 'item';
      next;
    }
    if ($mode eq 'none' || ($mode eq 'item' && $ln !~ /^\s{2,}/)) {
      push @out, '.PP';
      $mode = 'para';
    }
    push @out, esc(trim($ln));
  }
  return @out;
}

# The declaration as a SYNOPSIS: one parameter a line, types bold, names italic.
sub synopsis {
  my ($f) = @_;
  my $head = $f->{ret} . ($f->{ret} =~ /\*$/ ? '' : ' ') . $f->{name} . '(';
  my @args;
  my ($depth, $cur) = (0, '');
  for my $c (split //, $f->{args}) {
    $depth++ if $c eq '(';
    $depth-- if $c eq ')';
    if ($c eq ',' && $depth == 0) { push @args, trim($cur); $cur = ''; next; }
    $cur .= $c;
  }
  push @args, trim($cur);
  my @out;
  if (@args == 1 && ($args[0] eq 'void' || $args[0] eq '')) {
    return ('.B ' . quote("$head$args[0]);"));
  }
  my $pad = ' ' x length($head);
  for my $i (0 .. $#args) {
    my ($type, $name) = $args[$i] =~ /^(.*?)(\w+)$/ or die "gen-manpage: parameter $args[$i]\n";
    $type .= ' ' unless $type =~ /[\s*]$/;
    my $sep = $i == $#args ? ');' : ',';
    push @out, '.BI ' . quote(($i == 0 ? $head : $pad) . $type) . ' ' . $name . ' ' . quote($sep);
  }
  return @out;
}

# Status codes a function may return, in code order.
my %extra_meaning = (
  LM_ERR_INVALID_ARGUMENT => 'a bad argument (a NULL, destroyed or foreign handle, a NULL output ' .
                             'pointer, a value out of range); the call had no effect',
  LM_ERR_INVALID_USAGE => 'a valid argument at the wrong time: this rank is not in the mesh, the ' .
                          'mesh is broken by an earlier failure, or a nonblocking reshard is in flight',
  LM_ERR_REMOTE => 'another rank of the collective call failed; the message names it with its ' .
                   'status and the start of its message',
  LM_ERR_MISMATCH => 'the ranks passed different arguments (every rank gets it, naming the field ' .
                     'and the ranks, before any data moves)',
  LM_ERR_TIMEOUT => 'other ranks did not arrive within LM_TIMEOUT seconds (or the mesh\'s ' .
                    'timeout); the mesh is marked broken',
);
sub errors_of {
  my ($f, $text) = @_;
  my %e;
  $e{$_} = 1 for $text =~ /\b(LM_ERR_\w+)\b/g;
  my $takes_ptr = $f->{args} =~ /\*|lm_\w+_t\b/;
  $e{LM_ERR_INVALID_ARGUMENT} = 1 if $takes_ptr;
  if ($text =~ /\b[Cc]ollective\b|\bagrees\b/) {
    $e{$_} = 1 for qw(LM_ERR_INVALID_USAGE LM_ERR_MISMATCH LM_ERR_MPI LM_ERR_REMOTE LM_ERR_TIMEOUT);
  }
  $e{LM_ERR_OUT_OF_MEMORY} = 1
    if $f->{name} =~ /_create|_zeros|_from_|_alloc|_reshard$|_local_map|_export|_start|_execute|_gather/;
  $e{LM_ERR_USER} = 1 if $f->{name} eq 'lm_local_map';
  if ($text =~ /kDLCUDA|\bCUDA\b|device/ && $f->{name} !~ /device_supported|_transport$/) {
    $e{$_} = 1 for qw(LM_ERR_NOT_SUPPORTED LM_ERR_CUDA);
    $e{LM_ERR_NCCL} = 1 if $text =~ /NCCL/;
  }
  return sort { ($code{$a} // 99) <=> ($code{$b} // 99) } grep { exists $code{$_} } keys %e;
}

# SEE ALSO: localmap(3), then the pages most related to this one, each once and only pages this
# script writes: the functions the comment names, the others of its example block, the functions
# its example calls, then (to at least 4) the nearest declarations of its header, its section's
# first; at most 12 in all;
# then the public headers (include/) that the comment or the example names, other than its own.
my (%example, %by_name, %siblings, %brief_of_header);
sub see_also {
  my ($f) = @_;
  my ($body, $params, $ret) = doc_parts($f->{doc});
  my $text = join(' ', @$body, map { "$_->[0] $_->[1]" } @$params) . ' ' . ($ret // '');
  my $code = join("\n", @{$example{$f->{name}} // []});
  my (@refs, %seen);
  $seen{$f->{name}} = 1;
  my $add = sub { for (@_) { push @refs, $_ if $by_name{$_} && !$seen{$_}++; } };
  $add->($text =~ /\b(lm_\w+)/g);
  $add->(@{$siblings{$f->{name}} // []});
  $add->($code =~ /\b(lm_\w+)\s*\(/g);
  if (@refs < 4) {  # the nearest declarations of its header, those of its section first
    my @h = grep { $_->{header} eq $f->{header} } @funcs;
    my ($at) = grep { $h[$_]{name} eq $f->{name} } 0 .. $#h;
    my @near = sort { ($h[$b]{section} eq $f->{section}) <=> ($h[$a]{section} eq $f->{section})
                      || abs($a - $at) <=> abs($b - $at) || $a <=> $b } grep { $_ != $at } 0 .. $#h;
    for my $i (@near) { last if @refs >= 4; $add->($h[$i]{name}); }
  }
  @refs = @refs[0 .. 11] if @refs > 12;
  @refs = ('localmap', @refs);
  my @out;
  for my $i (0 .. $#refs) {
    push @out, '.BR ' . $refs[$i] . ' (3)' . ($i == $#refs ? '' : ',');
  }
  (my $own = $f->{header}) =~ s{^include/}{};
  my %hseen = ($own => 1);
  for my $h ("$text\n$code" =~ /\b(localmap[\w.]*\.h(?:pp)?)\b/g) {
    next if $hseen{$h}++;
    my $b = $brief_of_header{$h} // next;
    push @out, '.PP', 'The header', '.IR ' . quote("<$h>") . ' :', esc($b);
  }
  return @out;
}

# The first phrase of each public header's @brief (up to its first colon or full stop).
for my $h (sort glob('include/*.h include/*.hpp')) {
  open my $fh, '<', $h or die "$h: $!\n";
  local $/;
  my $t = <$fh>;
  close $fh;
  next unless $t =~ /\@brief\s+(.*?)(?:\n\s*(?:\*|\/\/\/)\s*\n|\*\/|\n\s*\/\/\/\s*\@)/s;
  my $b = $1;
  $b =~ s/\n\s*(?:\*|\/\/\/)\s?/ /g;
  $b =~ s/\s+/ /g;
  $b =~ s/^\S+ — //;
  $b =~ s/^(.*?)[:.](\s.*)?$/$1/;
  (my $name = $h) =~ s{^include/}{};
  $brief_of_header{$name} = "$b.";
}

# ------------------------------------------------------------------------------------ examples
{
  open my $fh, '<', 'docs/man-examples.txt' or die "docs/man-examples.txt: $!\n";
  my (@names, @code);
  my $flush = sub {
    return unless @names;
    pop @code while @code && $code[-1] =~ /^\s*$/;
    for my $n (@names) {
      die "gen-manpage: two examples for $n in docs/man-examples.txt\n" if $example{$n};
      $example{$n} = [@code];
      $siblings{$n} = [grep { $_ ne $n } @names];
    }
  };
  while (my $ln = <$fh>) {
    chomp $ln;
    if ($ln =~ /^\@\@\s+(.*)/) { $flush->(); @names = split ' ', $1; @code = (); next; }
    next unless @names;  # the file's header comment
    push @code, $ln;
  }
  $flush->();
  close $fh;
  %by_name = map { $_->{name} => $_ } @funcs;
  for my $n (sort keys %example) {
    die "gen-manpage: docs/man-examples.txt names $n, which no header declares\n" unless $by_name{$n};
  }
}

# ------------------------------------------------------------------------------------- writing
sub write_file {
  my ($path, @lines) = @_;
  open my $fh, '>', "$path.tmp" or die "$path.tmp: $!\n";
  print $fh "$_\n" for @lines;
  close $fh or die "$path.tmp: $!\n";
  rename "$path.tmp", $path or die "$path: $!\n";
}

sub page {
  my ($f) = @_;
  my ($body, $params, $ret) = doc_parts($f->{doc});
  my $brief = brief_of($f);
  $brief =~ s/\.$//;
  my $text = join(' ', @$body, map { "$_->[0] $_->[1]" } @$params) . ' ' . ($ret // '');
  my $hdr = $f->{header};
  $hdr =~ s{^include/}{};
  my @p = (
    '.\\" SPDX-License-Identifier: BSD-3-Clause',
    ".\\\" $f->{name}(3): generated by tools/gen-manpage.sh from $f->{header}; do not edit.",
    '.TH ' . uc($f->{name}) . " 3 \"\" \"localmap $version\" \"localmap manual\"",
    '.SH NAME',
    "$f->{name} \\- " . esc($brief || $f->{name}),
    '.SH SYNOPSIS',
    '.nf',
    ".B #include <$hdr>",
    '.PP',
    synopsis($f),
    '.fi',
    '.PP',
    'Link with',
    '.BR "$(pkg\-config \-\-libs localmap)" .',
    '.SH DESCRIPTION',
    render_body(@$body),
  );
  if ($f->{inline}) {
    push @p, '.PP', "A static inline function of $hdr: it has no symbol of its own in the library.";
  }
  if (@$params) {
    push @p, '.SH PARAMETERS';
    push @p, '.TP', '.I ' . $_->[0], esc(trim($_->[1])) for @$params;
  }
  push @p, '.SH RETURN VALUE';
  if (defined $ret) {
    push @p, esc(trim($ret));
  } elsif ($f->{ret} eq 'lm_status_t') {
    push @p, '.B LM_SUCCESS',
      '(0) on success, else one of the codes below; then',
      '.BR lm_last_error_message (3)',
      'explains the failure, naming the function, the argument and the rank.';
  } elsif ($f->{ret} eq 'void') {
    push @p, 'None.';
  } else {
    push @p, 'The value described above.';
  }
  push @p, '.SH ERRORS';
  if ($f->{ret} eq 'lm_status_t') {
    my @codes = errors_of($f, $text);
    for my $c (@codes) {
      push @p, '.TP', ".B $c", esc($extra_meaning{$c} // $meaning{$c} // '');
    }
    push @p, '.PP' if @codes;
    push @p, 'See',
      '.BR localmap (3)',
      'for what each code means for the handles (an',
      '.B LM_ERR_INVALID_ARGUMENT',
      'call had no effect) and for the mesh (transport failures and timeouts mark it broken).';
  } else {
    push @p, 'None: this function cannot fail.';
  }
  push @p, '.SH EXAMPLE';
  if (my $ex = $example{$f->{name}}) {
    push @p, 'CHECK(call) stands for: on a status other than LM_SUCCESS, print',
      '.BR lm_last_error_message ()',
      'and stop.', '.PP', '.RS 4', '.nf';
    push @p, map { my $l = $_; $l =~ s/\\/\\e/g; $l =~ s/^([.'])/\\&$1/; $l } @$ex;
    push @p, '.fi', '.RE';
  } else {
    push @p, '(no example yet: add one to docs/man-examples.txt)';
  }
  push @p, '.SH SEE ALSO', see_also($f);
  return @p;
}

# localmap(3): the template with the list of functions.
my @list;
my $cur_h = '';
for my $f (@funcs) {
  if ($f->{header} ne $cur_h) {
    $cur_h = $f->{header};
    (my $b = $cur_h) =~ s{.*/}{};
    push @list, ".SS $b";
  }
  push @list, '.TP', ".BR $f->{name} (3)", esc(brief_of($f) || '(undocumented)');
}
open my $tf, '<', 'docs/localmap.3.in' or die "docs/localmap.3.in: $!\n";
my @main;
while (my $ln = <$tf>) {
  chomp $ln;
  $ln =~ s/\@VERSION\@/$version/g;
  if ($ln eq '@FUNCTIONS@') { push @main, @list; next; }
  push @main, $ln;
}
close $tf;
write_file($out, @main);

if ($mandir ne '') {
  -d $mandir or mkdir $mandir or die "$mandir: $!\n";
  my %want = map { ("$_->{name}.3" => 1) } @funcs;
  opendir my $dh, $mandir or die "$mandir: $!\n";
  for my $old (readdir $dh) {  # pages of functions no longer declared
    unlink "$mandir/$old" if $old =~ /^lm_\w+\.3$/ && !$want{$old};
  }
  closedir $dh;
  write_file("$mandir/$_->{name}.3", page($_)) for @funcs;
}
PERL
